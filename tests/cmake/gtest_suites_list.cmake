# Script for mha_gtest_suites (gtest_suites.cmake): writes CTEST_FILE with the ctest tests of
# TEST_EXECUTABLE's test suites, as `TEST_EXECUTABLE --gtest_list_tests` names them. Suite lines
# start in column 0 and end in "." (typed suites add "  # TypeParam = ..."); test lines are
# indented. Up to PER_PROCESS suites in a row share one test (one process, --gtest_filter=A.*:B.*,
# named A+B); a suite named in SERIAL (RUN_SERIAL), PICK_PORTS (RESOURCE_LOCK mha_picked_ports) or
# OWN has a test of its own, named after it.
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  WORKING_DIRECTORY "${WORKING_DIR}"
  OUTPUT_VARIABLE output
  RESULT_VARIABLE result
  TIMEOUT 60)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${result}):\n${output}")
endif()
string(REPLACE "," ";" SERIAL "${SERIAL}")  # suites that run alone (RUN_SERIAL)
string(REPLACE "," ";" OWN "${OWN}")        # suites with a process of their own
string(REPLACE "," ";" PICK_PORTS "${PICK_PORTS}")  # suites that pick ports (one at a time)
if(NOT PER_PROCESS GREATER 0)
  message(FATAL_ERROR "PER_PROCESS must be a positive number of suites, not '${PER_PROCESS}'")
endif()
string(REPLACE ";" "\\;" output "${output}")
string(REPLACE "\n" ";" lines "${output}")
set(content "")
set(count 0)
set(group "")

# add_test for the suites in ARGN (one process); EXTRA: more properties.
macro(_mha_suites_test extra)
  string(REPLACE ";" "+" name "${ARGN}")
  string(REPLACE ";" ".*:" filter "${ARGN}")
  string(APPEND content
    "add_test([==[${name}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${filter}.*]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==]"
    " LABELS [==[${LABELS}]==] TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77${extra})\n")
endmacro()

foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    math(EXPR count "${count} + 1")
    list(FIND SERIAL "${suite}" serial_at)  # (IN_LIST needs a policy that -P scripts do not set)
    list(FIND OWN "${suite}" own_at)
    list(FIND PICK_PORTS "${suite}" ports_at)
    if(serial_at GREATER -1)
      _mha_suites_test(" RUN_SERIAL TRUE" "${suite}")
      list(REMOVE_ITEM SERIAL "${suite}")
    elseif(ports_at GREATER -1)
      _mha_suites_test(" RESOURCE_LOCK mha_picked_ports" "${suite}")
      list(REMOVE_ITEM PICK_PORTS "${suite}")
    elseif(own_at GREATER -1)
      _mha_suites_test("" "${suite}")
      list(REMOVE_ITEM OWN "${suite}")
    else()
      list(APPEND group "${suite}")
      list(LENGTH group size)
      if(size EQUAL PER_PROCESS)
        _mha_suites_test("" ${group})
        set(group "")
      endif()
    endif()
  endif()
endforeach()
if(group)
  _mha_suites_test("" ${group})
endif()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests named no test suite:\n${output}")
endif()
if(SERIAL OR OWN OR PICK_PORTS)
  message(FATAL_ERROR "${TEST_EXECUTABLE}: no test suite named ${SERIAL} ${OWN} ${PICK_PORTS}"
    " (SERIAL, PICK_PORTS or OWN of mha_gtest_suites)")
endif()
file(WRITE "${CTEST_FILE}" "${content}")
