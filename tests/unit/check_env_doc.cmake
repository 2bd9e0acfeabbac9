# Fails if docs/environment.md differs from `braid-info --markdown`.
execute_process(COMMAND ${INFO} --markdown OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "braid-info --markdown failed (${rc})")
endif()
file(READ ${DOC} current)
if(NOT generated STREQUAL current)
  message(FATAL_ERROR "${DOC} is out of date: regenerate it with `braid-info --markdown > docs/environment.md`")
endif()
