// SessionKv (sessions/session_kv.h) through LlamaSessions: a Llama session, one KV cache per
// layer, handed over between two stores (two owners on one real redis-server) while it is half way
// through a token (layers 0-1 of token 3 done, layers 2-3 not), then decoded on exactly: every
// layer's output equals the fixture's PyTorch row. With write-behind, its replica lost: restored
// with the whole blocks every layer wrote, its first step refused saying how many tokens it holds.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llama_serving_util.h"
#include "mha/llama_session.h"
#include "redis_server.h"
#include "server/serving/sessions/session_kv.h"

namespace mha::serve {
namespace session_kv_llama_test {

using testing::Contains;
using testing::RedisServer;

class SessionKvLlama : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadFixtureModel("stack4_sessions");
    ASSERT_NE(model_.stack, nullptr);
    c_ = testing::LoadLlamaCase("stack4_sessions");
    ASSERT_TRUE(redis_.Start());
  }
  struct Replica {
    std::shared_ptr<KvTier> tier;
    std::unique_ptr<LlamaSessions> store;
  };
  std::unique_ptr<Replica> MakeReplica(bool write_behind, int64_t lease_ms = 30000) {
    auto r = std::make_unique<Replica>();
    KvTierOptions kv;
    kv.url = redis_.url();
    kv.write_behind = write_behind;
    kv.lease_ms = lease_ms;
    kv.handover_timeout_ms = 30000;
    auto tier = KvTier::Create(kv);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    r->tier = *tier;
    SessionOptions o = testing::SmallPool(64 * 4 * model_.info.kv_bytes_per_token, 4);
    o.kv_tier = r->tier;
    r->store = std::make_unique<LlamaSessions>(o, RequestLimits{}, model_.stack, model_.info,
                                               SessionLocation{"llama", "1", "f"},
                                               std::make_shared<SessionDirectory>(), nullptr);
    return r;
  }
  // Token p of session "s0" through layers [from, to) on `store` (its hidden state carried in
  // hidden_): each layer's output checked. Returns the first refusal.
  Status Step(LlamaSessions& store, int64_t p, int64_t from, int64_t to) {
    std::shared_ptr<std::optional<LlamaSessions::Hold>> hold =
        std::make_shared<std::optional<LlamaSessions::Hold>>();
    MHA_RETURN_IF_ERROR(store.Acquire(
        {"s0"}, [](size_t) { return std::string(); },
        [hold](LlamaSessions::Hold h, CallerThread&) { *hold = std::move(h); }, [](Status) {},
        testing::Worker()));
    EXPECT_TRUE(hold->has_value());
    if (from == 0) hidden_ = c_.Io("s0.input").narrow(0, p, 1);
    Status status;
    for (int64_t layer = from; layer < to && status.ok(); ++layer) {
      const auto& s = (*hold)->sessions.front();
      status = store.PrepareLayer(s, layer, 1, testing::Worker());
      if (!status.ok()) break;
      at::Tensor out;
      status = StepSessions(*model_.stack, layer, {{s->cache.get(), hidden_, &out}});
      EXPECT_TRUE(testing::TensorsNear(out,
                                       c_.Io("s0.output." + std::to_string(layer)).narrow(0, p, 1),
                                       testing::kFp32Tolerance))
          << "token " << p << " layer " << layer;
      hidden_ = hidden_ + out;
    }
    store.FinishMessage(**hold);
    return status;
  }

  LoadedLlamaModel model_;
  testing::LlamaCase c_;
  RedisServer redis_;
  at::Tensor hidden_;
};

TEST_F(SessionKvLlama, AHandoverHalfWayThroughATokenDecodesOnExactly) {
  auto a = MakeReplica(false), b = MakeReplica(false);
  ASSERT_TRUE(a->store->Claim("s0").ok());
  ASSERT_TRUE(testing::OpenLlama(*a->store, 100, "s0").ok());
  for (int64_t p = 0; p < 3; ++p) ASSERT_TRUE(Step(*a->store, p, 0, 4).ok());
  ASSERT_TRUE(Step(*a->store, 3, 0, 2).ok());  // token 3 in layers 0 and 1 only
  ASSERT_TRUE(b->store->Adopt("s0", testing::Worker()).ok());
  EXPECT_EQ(a->tier->counters().released, 1);
  ASSERT_TRUE(Step(*b->store, 3, 2, 4).ok()) << "token 3 goes on at layer 2 on the other replica";
  for (int64_t p = 4; p < 6; ++p) ASSERT_TRUE(Step(*b->store, p, 0, 4).ok());
}

TEST_F(SessionKvLlama, ALostReplicaWithWriteBehindCostsTheTailOfOneBlock) {
  auto a = MakeReplica(true, 300);
  ASSERT_TRUE(a->store->Claim("s0").ok());
  ASSERT_TRUE(testing::OpenLlama(*a->store, 100, "s0").ok());
  for (int64_t p = 0; p < 5; ++p) ASSERT_TRUE(Step(*a->store, p, 0, 4).ok());  // 1 block + 1
  ASSERT_TRUE(a->tier->queue().Flush(std::chrono::steady_clock::now() + testing::kWaitTimeout));
  a.reset();
  auto b = MakeReplica(true);
  ASSERT_TRUE(b->store->Adopt("s0", testing::Worker()).ok());
  const Status refused = Step(*b->store, 5, 0, 1);
  EXPECT_EQ(refused.code(), StatusCode::kAborted);
  EXPECT_TRUE(Contains(refused.message(), "[session_tokens=4]")) << refused.message();
  for (int64_t p = 4; p < 6; ++p) ASSERT_TRUE(Step(*b->store, p, 0, 4).ok());
}

}  // namespace session_kv_llama_test
}  // namespace mha::serve
