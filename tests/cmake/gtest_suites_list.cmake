# Script for mha_gtest_suites (gtest_suites.cmake): writes CTEST_FILE with one add_test per test
# suite that TEST_EXECUTABLE --gtest_list_tests names. Suite lines start in column 0 and end in
# "." (typed suites add "  # TypeParam = ..."); test lines are indented.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  WORKING_DIRECTORY "${WORKING_DIR}"
  OUTPUT_VARIABLE output
  RESULT_VARIABLE result
  TIMEOUT 60)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${result}):\n${output}")
endif()
string(REPLACE "," ";" SERIAL "${SERIAL}")  # suites that run alone (RUN_SERIAL)
string(REPLACE ";" "\\;" output "${output}")
string(REPLACE "\n" ";" lines "${output}")
set(content "")
set(count 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    set(serial "")
    list(FIND SERIAL "${suite}" at)  # (IN_LIST needs a policy that -P scripts do not set)
    if(at GREATER -1)
      set(serial " RUN_SERIAL TRUE")
      list(REMOVE_ITEM SERIAL "${suite}")
    endif()
    string(APPEND content
      "add_test([==[${suite}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "set_tests_properties([==[${suite}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==]"
      " LABELS [==[${LABELS}]==] TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77${serial})\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests named no test suite:\n${output}")
endif()
if(SERIAL)
  message(FATAL_ERROR "${TEST_EXECUTABLE}: no test suite named ${SERIAL} (SERIAL of mha_gtest_suites)")
endif()
file(WRITE "${CTEST_FILE}" "${content}")
