// The session record codec (sessions/redis/session_record.h): a record round-trips exactly, and
// anything else is DATA_LOSS naming the session: malformed text (each field missing, repeated,
// unknown, out of range), block counts that do not match the tokens, another model, model version
// (fingerprint), kind, dtype or shape than the replica serves.
#include "server/serving/sessions/redis/session_record.h"

#include <gtest/gtest.h>

#include <string>

namespace mha::serve {
namespace session_record_test {

SessionRecord Sample() {
  SessionRecord r;
  r.session_id = "s-1";
  r.model = "enc model%\nodd";
  r.version = "2";
  r.fingerprint = "00ff00ff00ff00ff";
  r.kind = "llama";
  r.dtype = "float32";
  r.rows = 2;
  r.heads = 4;
  r.head_dim = 8;
  r.dtype_bytes = 4;
  r.block_tokens = 16;
  r.max_tokens = 512;
  r.tokens = 40;
  r.layers = {{40, {"a", "b", "c"}}, {33, {"a", "b", "d"}}};
  return r;
}

SessionRecordExpect Expect() {
  return {"enc model%\nodd", "00ff00ff00ff00ff", "llama", "float32", 4, 8, 2};
}

void ExpectDataLoss(const std::string& text, const std::string& part) {
  auto r = DecodeSessionRecord("s-1", text, Expect());
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("session 's-1'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(SessionRecord, RoundTripsExactly) {
  const SessionRecord r = Sample();
  auto back = DecodeSessionRecord("s-1", EncodeSessionRecord(r), Expect());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model, r.model);
  EXPECT_EQ(back->tokens, 40);
  EXPECT_FALSE(back->released);
  ASSERT_EQ(back->layers.size(), 2u);
  EXPECT_EQ(back->layers[1].tokens, 33);
  EXPECT_EQ(back->layers[1].blocks, (std::vector<std::string>{"a", "b", "d"}));
  EXPECT_EQ(back->durable_tokens(), 33);
  EXPECT_EQ(back->bytes_per_token(), 2 * 4 * 8 * 4);
  EXPECT_EQ(back->BlockBytes(1, 2), 2 * 1 * back->bytes_per_token()) << "33 = 2 * 16 + 1";
  EXPECT_EQ(back->BlockBytes(0, 0), 2 * 16 * back->bytes_per_token());
}

TEST(SessionRecord, MalformedTextIsDataLossNamingWhat) {
  const std::string good = EncodeSessionRecord(Sample());
  ExpectDataLoss("", "does not start with");
  ExpectDataLoss(Replace(good, "rows 2\n", ""), "field 'rows' missing");
  ExpectDataLoss(Replace(good, "rows 2\n", "rows 2\nrows 2\n"), "field 'rows' repeated");
  ExpectDataLoss(Replace(good, "rows 2\n", "rows 2\ncolour red\n"), "unknown field 'colour'");
  ExpectDataLoss(Replace(good, "rows 2\n", "rows -2\n"), "field 'rows' is malformed");
  ExpectDataLoss(Replace(good, "rows 2\n", "rows 0\n"), "field 'rows' is malformed");
  ExpectDataLoss(Replace(good, "cross 0\n", "cross yes\n"), "field 'cross' is malformed");
  ExpectDataLoss(Replace(good, "layers 2\n", "layers 3\n"), "2 layer lines for layers 3");
  ExpectDataLoss(Replace(good, "layer 40 a b c\n", "layer 40 a b\n"),
                 "layer 0 holds 40 tokens in 2 blocks, 3 expected");
  ExpectDataLoss(Replace(good, "layer 40 ", "layer x "), "layer 0: token count malformed");
  ExpectDataLoss(Replace(good, "session s-1\n", "session s-2\n"), "names session 's-2'");
  ExpectDataLoss(Replace(good, "model enc model%25%0Aodd", "model a%zz"), "'model' is malformed");
  ExpectDataLoss(Replace(good, "dtype_bytes 4\n", "dtype_bytes 2\n"), "dtype_bytes 2");
}

TEST(SessionRecord, AnotherVersionDtypeKindOrShapeIsDataLoss) {
  SessionRecord r = Sample();
  r.fingerprint = "1111111111111111";
  ExpectDataLoss(EncodeSessionRecord(r), "another model version (fingerprint) '1111111111111111'");
  r = Sample();
  r.model = "dec";
  ExpectDataLoss(EncodeSessionRecord(r), "of model 'dec'");
  r = Sample();
  r.dtype = "bfloat16";
  r.dtype_bytes = 2;
  ExpectDataLoss(EncodeSessionRecord(r), "of dtype 'bfloat16', this replica serves 'float32'");
  r = Sample();
  r.kind = "multihead";
  ExpectDataLoss(EncodeSessionRecord(r), "of kind 'multihead'");
  r = Sample();
  r.heads = 2;
  ExpectDataLoss(EncodeSessionRecord(r), "2 layers x 2 heads x 8");
}

}  // namespace session_record_test
}  // namespace mha::serve
