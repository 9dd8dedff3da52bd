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

# Every GoogleTest binary also compiles as a unity build: its test files in batches of
# MHA_TEST_UNITY_BATCH per unit, so the headers' templates (ATen, gtest, gRPC, protobuf) are
# instantiated once a batch, not once a file (the service tests: 2.5x less compile time for three
# files in one unit). -DMHA_TEST_UNITY=OFF compiles each file alone (to check its includes).
option(MHA_TEST_UNITY "Compile the test binaries as unity builds" ON)
set(MHA_TEST_UNITY_BATCH 6 CACHE STRING "Test files per unity unit")

function(mha_gtest_suites target)
  cmake_parse_arguments(ARG "" "LABELS;TIMEOUT" "SERIAL" ${ARGN})
  if(MHA_TEST_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
      UNITY_BUILD_BATCH_SIZE ${MHA_TEST_UNITY_BATCH})
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
