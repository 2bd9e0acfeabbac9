# Warning flags for Braid's own targets (not for users of the package).
add_library(braid_warnings INTERFACE)
target_compile_options(braid_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>)
option(BRAID_WERROR "Treat warnings as errors" OFF)
if(BRAID_WERROR)
  target_compile_options(braid_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX,C>:-Werror>)
endif()
