// main() of every GoogleTest binary here: GoogleTest's, plus exit code 77 when nothing ran but
// skipped tests (the CUDA-only suites without CUDA). ctest runs each such suite in a process of
// its own (OWN in tests/cmake/gtest_suites.cmake) and reports 77 as "skipped" (SKIP_RETURN_CODE),
// so it is not counted as passed; a failure anywhere still exits 1.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (result == 0 && unit.successful_test_count() == 0 && unit.skipped_test_count() > 0) {
    return 77;
  }
  return result;
}
