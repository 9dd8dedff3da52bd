# mha_gtest_suites(TARGET LABELS label TIMEOUT seconds [SERIAL suite...] [PICK_PORTS suite...]
#                  [OWN suite...])
#
# ctest tests for the GoogleTest test suites of TARGET: up to MHA_TEST_SUITES_PER_PROCESS suites in
# a row share one, run as `TARGET --gtest_filter=A.*:B.*` and named `A+B` (so `ctest -R A` still
# finds A). Every process of a LibTorch binary pays LibTorch's start-up, ~0.8 s of CPU before its
# first test (symbol binding and operator registration of ~290 libraries): 177 unit suites as 177
# processes spent ~150 s of CPU on it. gtest_discover_tests makes one process per test instead, and
# a service test then pays for a server of its own too (mha_service_tests: ~560 s as 179 processes,
# 110 s as one). Tests of one suite share a process and, where the suite says so (SharedServerTest),
# a server; gtest still reports every test by name, and `TARGET --gtest_filter=...` runs one alone.
# The list is read from `TARGET --gtest_list_tests` after each build, as gtest_discover_tests does.
# A process whose tests all skip (the CUDA-only suites without CUDA) exits 77
# (common/gtest_main.cc) and is reported as skipped: such suites are named after OWN, so that each
# has a test of its own and ctest reports it skipped. ctest runs tests in parallel
# (scripts/test.sh); the suites named after SERIAL run alone (RUN_SERIAL): those that bound a
# time; those named after PICK_PORTS pick a port before a server binds it
# (ServerProcess::PickFreePort) and run one at a time (RESOURCE_LOCK mha_picked_ports) but beside
# the rest (docs/testing.md). Every suite named must exist.
set(MHA_TEST_SUITES_PER_PROCESS 8 CACHE STRING
  "GoogleTest suites that share one ctest test and process (1: a process per suite)")
set(_MHA_GTEST_SUITES_LIST ${CMAKE_CURRENT_LIST_DIR}/gtest_suites_list.cmake)

# With MHA_UNITY (CMakeLists.txt) a GoogleTest binary's test files compile as one unit
# (MHA_TEST_UNITY_BATCH 0; N: N files per unit): the headers' templates (ATen, gtest, gRPC,
# protobuf) are instantiated once a binary, not once a file (mha_core_tests' 38 files: 41 s as one
# unit, 99 s as seven). Test helpers live in a namespace named after their file, so files never
# collide.
set(MHA_TEST_UNITY_BATCH 0 CACHE STRING "Test files per unity unit (0: all of a binary's)")
# The tests' own code compiles at MHA_TEST_OPTIMIZE (the code under test is the libraries', built
# at the build type's level): -O3 doubles the test units' compile time (85 s against 41 s for
# mha_core_tests) and speeds up nothing the suite waits for. Empty: the build type's level.
set(MHA_TEST_OPTIMIZE -O1 CACHE STRING "Optimisation flag of the test binaries' own units")

function(mha_gtest_suites target)
  cmake_parse_arguments(ARG "" "LABELS;TIMEOUT" "SERIAL;OWN;PICK_PORTS" ${ARGN})
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${MHA_UNITY}
    UNITY_BUILD_BATCH_SIZE ${MHA_TEST_UNITY_BATCH})
  if(MHA_TEST_OPTIMIZE)
    target_compile_options(${target} PRIVATE ${MHA_TEST_OPTIMIZE})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  string(REPLACE ";" "," serial "${ARG_SERIAL}")  # no ';' on the command line
  string(REPLACE ";" "," own "${ARG_OWN}")
  string(REPLACE ";" "," pick_ports "${ARG_PICK_PORTS}")
  set(list_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND}
      -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
      -D "WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}"
      -D "CTEST_FILE=${list_file}"
      -D "LABELS=${ARG_LABELS}"
      -D "TIMEOUT=${ARG_TIMEOUT}"
      -D "SERIAL=${serial}"
      -D "OWN=${own}"
      -D "PICK_PORTS=${pick_ports}"
      -D "PER_PROCESS=${MHA_TEST_SUITES_PER_PROCESS}"
      -P ${_MHA_GTEST_SUITES_LIST}
    BYPRODUCTS ${list_file}
    VERBATIM)
  file(WRITE ${include_file}
    "if(EXISTS \"${list_file}\")\n"
    "  include(\"${list_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
