// The REST body's bounded JSON layer (json_body.h): the inputs' data collected outside the tree,
// and NaN / Infinity / -Infinity accepted as values of an input's data and nowhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "server/frontends/rest/json_body.h"

namespace mha::serve::rest {
namespace rest_json_body_test {

std::vector<float> Floats(const TensorData& d) {
  std::vector<float> v(static_cast<size_t>(d.count));
  EXPECT_EQ(d.floats.size(), v.size() * sizeof(float));
  std::memcpy(v.data(), d.floats.data(), std::min(d.floats.size(), v.size() * sizeof(float)));
  return v;
}

StatusOr<ParsedBody> Parse(const std::string& text) { return ParseJsonBody(text, BodyLimits{}); }

TEST(RestJsonBody, DataIsCollectedOutsideTheTree) {
  auto parsed = Parse(R"({"id": "7", "inputs": [{"name": "q", "data": [[1, 2.5], [true, -3]]},
                          {"name": "k", "data": ["x", null, {"a": 1}]}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->document["inputs"][0]["data"], nlohmann::json::array());
  EXPECT_EQ(parsed->document["id"], "7");
  ASSERT_EQ(parsed->data.size(), 2u);
  EXPECT_EQ(Floats(parsed->data[0]), (std::vector<float>{1, 2.5f, 1, -3}));
  EXPECT_EQ(parsed->data[0].bools, 1);
  EXPECT_EQ(parsed->data[1].non_numbers, 3);  // a string, a null, an object
}

// What Python's json.dumps writes for float('nan'), float('inf'), -float('inf'), at any nesting of
// an input's data; a zero the client sends stays a zero.
TEST(RestJsonBody, NaNAndInfinitiesAreDataValues) {
  auto parsed = Parse(R"({"inputs": [{"name": "m", "shape": [2, 3],
                          "data": [[0.0, -Infinity, 0], [NaN, Infinity, -0.5]]}],
                          "parameters": {"x": 0}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const std::vector<float> v = Floats(parsed->data[0]);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], -INFINITY);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(v[4], INFINITY);
  EXPECT_EQ(v[5], -0.5f);
  EXPECT_EQ(parsed->data[0].non_numbers, 0);
  EXPECT_EQ(parsed->document["parameters"]["x"], 0);
  EXPECT_EQ(parsed->document["inputs"][0]["shape"], nlohmann::json::array({2, 3}));
}

TEST(RestJsonBody, TheTokensInsideStringsAreText) {
  auto parsed =
      Parse(R"({"id": "NaN \" Infinity", "inputs": [{"name": "-Infinity", "data": [1]}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->document["id"], "NaN \" Infinity");
  EXPECT_EQ(parsed->document["inputs"][0]["name"], "-Infinity");
  auto quoted = Parse(R"({"inputs": [{"data": ["NaN"]}]})");
  ASSERT_TRUE(quoted.ok());
  EXPECT_EQ(quoted->data[0].non_numbers, 1) << "a string is not a number, whatever it says";
}

// Anywhere but an input's data the tokens are what they always were: invalid JSON, with the
// reason.
TEST(RestJsonBody, TheTokensAnywhereElseAreInvalidJson) {
  for (const std::string body :
       {R"({"inputs": [], "parameters": {"timeout": NaN}})", R"({"id": Infinity, "inputs": []})",
        R"({"inputs": [{"name": "q", "shape": [-Infinity], "data": [1]}]})",
        R"({"inputs": [{"parameters": {"data": [NaN]}, "data": [1]}]})",
        R"({"inputs": [], "outputs": [{"name": "output", "data": [NaN]}]})",
        R"({"inputs": [[NaN]]})", R"({"data": [NaN], "inputs": []})", "NaN", "[NaN]"}) {
    auto parsed = Parse(body);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              "request body is not valid JSON (" + std::to_string(body.size()) +
                  " bytes): NaN, Infinity and -Infinity are accepted only as values of an "
                  "input's data")
        << body;
  }
  for (const std::string body :
       {R"({"inputs": [{"data": [1NaN]}]})", R"({"inputs": [{"data": [-NaN]}]})",
        R"({"inputs": [{"data": [nan, inf]}]})", R"({"inputs": [{"data": [+Infinity]}]})",
        R"({"inputs": [{"data": [NaN NaN]}]})"}) {
    auto parsed = Parse(body);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(parsed.status().message(),
              "request body is not valid JSON (" + std::to_string(body.size()) + " bytes)")
        << body;
  }
}

// The budget of values outside data and the depth bound hold with the tokens too.
TEST(RestJsonBody, BoundsHoldWithTheTokens) {
  std::string wide = R"({"inputs": [{"data": [NaN]}], "id": [)";
  for (int i = 0; i < 70000; ++i) wide += "[],";
  auto over = Parse(wide + "1]}");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("values outside the inputs' data"), std::string::npos);
  std::string many = R"({"inputs": [{"data": [)";
  for (int i = 0; i < 100000; ++i) many += i == 0 ? "-Infinity" : ",NaN";
  auto ok = Parse(many + "]}]}");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->data[0].count, 100000);
  EXPECT_EQ(Floats(ok->data[0])[0], -INFINITY);
  EXPECT_TRUE(std::isnan(Floats(ok->data[0])[99999]));
  EXPECT_FALSE(Parse(std::string(100, '[') + "NaN" + std::string(100, ']')).ok());
}

}  // namespace rest_json_body_test
}  // namespace mha::serve::rest
