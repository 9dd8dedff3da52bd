// The scan for the bare tokens NaN, Infinity and -Infinity (json_nonfinite.h): which tokens are
// rewritten (values only, never inside strings or glued to other characters), the rewrite keeps
// the text's length, the kinds are noted by number-token ordinal, and no copy is made without a
// token.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "server/frontends/rest/json_nonfinite.h"

namespace mha::serve::rest {
namespace rest_json_nonfinite_test {

using K = NumberKind;

TEST(RestNonFiniteTokens, ValuesAreRewrittenAsZerosOfTheSameLength) {
  const std::string text = R"({"a": [1, NaN,-2.5e3 ,Infinity], "b":-Infinity})";
  const NonFiniteScan scan = ScanNonFiniteTokens(text);
  ASSERT_TRUE(scan.found());
  EXPECT_EQ(scan.text, R"({"a": [1, 0  ,-2.5e3 ,0       ], "b":0        })");
  EXPECT_EQ(scan.text.size(), text.size());
  // Number tokens in order: 1, NaN, -2.5e3, Infinity, -Infinity.
  EXPECT_EQ(scan.kinds,
            (std::vector<K>{K::kFinite, K::kNaN, K::kFinite, K::kInfinity, K::kMinusInfinity}));
  EXPECT_EQ(scan.Kind(0), K::kFinite);
  EXPECT_EQ(scan.Kind(4), K::kMinusInfinity);
  EXPECT_EQ(scan.Kind(99), K::kFinite);
}

TEST(RestNonFiniteTokens, NothingFoundMeansNoCopy) {
  for (const std::string text :
       {R"({"inputs": [{"data": [0, 1, -2]}]})", R"({"id": "NaN", "x": ["Infinity", "-Infinity"]})",
        R"({"id": "a \" NaN"})", R"(["\\", "NaN"])", ""}) {
    const NonFiniteScan scan = ScanNonFiniteTokens(text);
    EXPECT_FALSE(scan.found()) << text;
    EXPECT_TRUE(scan.text.empty()) << text;
  }
}

// Only a token standing as a value: glued to a number, a sign, a letter or another token it is
// left for the lexer to refuse.
TEST(RestNonFiniteTokens, GluedTokensAreLeftAlone) {
  for (const std::string text :
       {"[1NaN]", "[-NaN]", "[+Infinity]", "[NaNx]", "[Infinity1]", "[1.5eNaN]", "[NaN-Infinity]",
        "[nan]", "[Inf]", "[-Inf]", "[infinity]", "{NaN: 1}", "[\"x\"NaN]", "[trueNaN]"}) {
    const NonFiniteScan scan = ScanNonFiniteTokens(text);
    EXPECT_FALSE(scan.found()) << text << " -> " << scan.text;
  }
  // Between delimiters and whitespace of every kind, and at the ends of the text.
  EXPECT_EQ(ScanNonFiniteTokens("NaN").text, "0  ");
  EXPECT_EQ(ScanNonFiniteTokens("[\tNaN\n,\r-Infinity]").text, "[\t0  \n,\r0        ]");
  EXPECT_EQ(ScanNonFiniteTokens("{\"a\":NaN}").text, "{\"a\":0  }");
}

TEST(RestNonFiniteTokens, ValuesAndTokens) {
  EXPECT_TRUE(std::isnan(NonFiniteValue(K::kNaN)));
  EXPECT_EQ(NonFiniteValue(K::kInfinity), INFINITY);
  EXPECT_EQ(NonFiniteValue(K::kMinusInfinity), -INFINITY);
  EXPECT_EQ(NonFiniteValue(K::kFinite), 0.0f);
  EXPECT_STREQ(NonFiniteToken(std::nanf("")), "NaN");
  EXPECT_STREQ(NonFiniteToken(-std::nanf("")), "NaN");
  EXPECT_STREQ(NonFiniteToken(INFINITY), "Infinity");
  EXPECT_STREQ(NonFiniteToken(-INFINITY), "-Infinity");
  EXPECT_EQ(NonFiniteToken(0.0f), nullptr);
  EXPECT_EQ(NonFiniteToken(3.4e38f), nullptr);
}

}  // namespace rest_json_nonfinite_test
}  // namespace mha::serve::rest
