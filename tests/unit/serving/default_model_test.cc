// The embedded default model (repository/default_model.h): READY with a fingerprint that names its
// weights (a fixed seed, its dtype and device), the same for every load of the same build, so that
// replicas sharing a KV store restore each other's sessions of it; its session record round-trips.
#include "server/serving/repository/default_model.h"

#include <gtest/gtest.h>

#include "server/serving/sessions/redis/session_record.h"

namespace mha::serve {
namespace default_model_test {

TEST(DefaultModel, HasAFingerprintOfItsWeightsThatASessionRecordCarries) {
  const ModelEntry a = MakeDefaultModel(LoadOverrides{});
  const ModelEntry b = MakeDefaultModel(LoadOverrides{});
  ASSERT_EQ(a.state, ModelState::kReady) << a.error;
  EXPECT_EQ(a.fingerprint, "builtin.float32.cpu");
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  LoadOverrides half;
  half.dtype = DType::kBFloat16;
  const ModelEntry c = MakeDefaultModel(half);
  ASSERT_EQ(c.state, ModelState::kReady) << c.error;
  EXPECT_NE(c.fingerprint, a.fingerprint) << "other weights, another fingerprint";

  SessionRecord r;
  r.session_id = "s";
  r.model = a.name;
  r.version = a.version;
  r.fingerprint = a.fingerprint;
  r.kind = "multihead";
  r.dtype = "float32";
  r.rows = 1;
  r.heads = 8;
  r.head_dim = 64;
  r.dtype_bytes = 4;
  r.block_tokens = 16;
  r.max_tokens = 64;
  r.tokens = 3;
  r.layers = {{3, {"b0"}}};
  const SessionRecordExpect expect{a.name, a.fingerprint, "multihead", "float32", 8, 64, 1};
  auto back = DecodeSessionRecord("s", EncodeSessionRecord(r), expect);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->fingerprint, a.fingerprint);
}

}  // namespace default_model_test
}  // namespace mha::serve
