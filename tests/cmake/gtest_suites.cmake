# mha_gtest_suites(TARGET LABELS label TIMEOUT seconds [SERIAL suite...])
#
# One ctest test per GoogleTest test suite of TARGET, named after the suite and run as
# `TARGET --gtest_filter=Suite.*`. gtest_discover_tests makes one process per test instead: a
# service test then pays for LibTorch's start-up in the test process and for a server of its own,
# which was most of the suite's time (mha_service_tests: ~560 s as 179 processes, 110 s as one).
# Tests of one suite share a process and, where the suite says so (SharedServerTest), a server;
# gtest still reports every test by name, and `TARGET --gtest_filter=...` runs one alone.
# The list is read from `TARGET --gtest_list_tests` after each build, as gtest_discover_tests does.
# A suite whose tests all skip (the CUDA-only ones without CUDA) exits 77 (common/gtest_main.cc)
# and is reported as skipped. ctest runs suites in parallel (scripts/test.sh); the suites named
# after SERIAL run alone (RUN_SERIAL): those that bound a time (docs/testing.md). Each must exist.
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
  cmake_parse_arguments(ARG "" "LABELS;TIMEOUT" "SERIAL" ${ARGN})
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${MHA_UNITY}
    UNITY_BUILD_BATCH_SIZE ${MHA_TEST_UNITY_BATCH})
  if(MHA_TEST_OPTIMIZE)
    target_compile_options(${target} PRIVATE ${MHA_TEST_OPTIMIZE})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  string(REPLACE ";" "," serial "${ARG_SERIAL}")  # no ';' on the command line
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
