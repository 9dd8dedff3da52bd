// The content fingerprint of a model version's files (repository/fingerprint.h): what a reload
// compares to decide whether a version changed.
#include "server/serving/repository/fingerprint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "test_util.h"

namespace mha::testing {
namespace fingerprint_test {

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(FingerprintTest, FollowsTheBytesNotSizeOrTime) {
  TempDir dir;
  const std::string a = Write(dir, "a.bin", "0123456789");
  auto first = serve::FingerprintFiles({a});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->size(), 16u);
  EXPECT_EQ(serve::FingerprintFiles({a}).value(), *first);
  Write(dir, "a.bin", "0123456780");  // same size
  EXPECT_NE(serve::FingerprintFiles({a}).value(), *first);
  EXPECT_EQ(serve::FingerprintFiles({dir.path() + "/missing"}).status().code(),
            StatusCode::kNotFound);
}

TEST(FingerprintTest, IsTheSameForTheSameFilesUnderAnotherRoot) {
  TempDir one, two;
  const std::string a = Write(one, "a.bin", "0123456789");
  const std::string b = Write(two, "a.bin", "0123456789");
  auto here = serve::FingerprintFiles({a}, one.path());
  auto there = serve::FingerprintFiles({b}, two.path());
  ASSERT_TRUE(here.ok() && there.ok());
  EXPECT_EQ(*here, *there);
  Write(two, "b.bin", "0123456789");
  EXPECT_NE(serve::FingerprintFiles({two.path() + "/b.bin"}, two.path()).value(), *here)
      << "another file name, another fingerprint";
}

}  // namespace fingerprint_test
}  // namespace mha::testing
