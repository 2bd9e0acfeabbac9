# braid_reject_tests(PREFIX LABEL ENV ONCE PROGRAM_VAR CASE...): tests that a
# program refuses bad command lines. Each CASE is "name;args;message" and
# adds the test PREFIX_name, which runs the program (the command list in the
# variable named PROGRAM_VAR) with args and passes when it exits 1 with
# message in its output (exactly once with ONCE 1: one rank of several
# speaks). ENV is the tests' environment list (may be empty).
function(braid_reject_tests prefix label env once program_var)
  math(EXPR _last "${ARGC} - 1")
  foreach(_i RANGE 5 ${_last})
    set(_case "${ARGV${_i}}")  # one argument each: its ';' kept
    list(POP_FRONT _case _name _args _message)
    separate_arguments(_args)
    add_test(NAME ${prefix}_${_name}
             COMMAND ${CMAKE_COMMAND} "-DMESSAGE=${_message}" -DONCE=${once}
                     -P ${PROJECT_SOURCE_DIR}/tests/unit/check_rejects.cmake -- ${${program_var}} ${_args})
    set_tests_properties(${prefix}_${_name} PROPERTIES TIMEOUT 60 LABELS ${label})
    if(env)
      set_tests_properties(${prefix}_${_name} PROPERTIES ENVIRONMENT "${env}")
    endif()
  endforeach()
endfunction()
