// Head options through a real mha-server (docs/heads.md): every request of tests/fixtures/heads
// (weights_heads, weights_query_begin/end, weights_top_k, weights_dtype, head_stats, head_mask and
// their combinations) against the PyTorch references of scripts/fixtures/head_reference.py, by
// Forward and in one ForwardStream; bad values; the response budget counting only what is selected;
// batching leaves such requests alone.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "heads_util.h"

namespace mha::testing {
namespace heads_test {

class HeadsServer : public SharedServerTest<HeadsServer> {
 public:
  // Batching on with a queue delay, so that plain requests do get merged around head requests.
  static SharedServerSpec Spec() {
    return {{"self_basic", "cross_attention", "bias_kv_zero_attn_kpm", "causal_kpm"},
            "",
            {"--default-model", "self_basic", "--max-queue-delay-us", "2000"}};
  }
};

FixtureCase Case(const std::string& name) {
  auto c = LoadFixtureCase(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c.value() : FixtureCase();
}

class HeadRequestParity : public HeadsServer, public ::testing::WithParamInterface<HeadRequest> {};

TEST_P(HeadRequestParity, MatchesPyTorchReference) {
  const HeadRequest& h = GetParam();
  const FixtureCase c = Case(h.case_name);
  ASSERT_TRUE(c.expected_weights.defined() && c.expected_weights.dim() == 4) << h.case_name;
  const TensorMap tensors = HeadTensors(h.case_name);
  auto response = client_->ForwardRaw(HeadForwardRequest(c, h, tensors));
  ASSERT_TRUE(response.ok()) << h.id << ": " << response.status().ToString();
  ExpectMatchesHeadRequest(*response, c, h, tensors);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HeadRequestParity, ::testing::ValuesIn(HeadRequests()),
                         [](const auto& info) {
                           return info.param.case_name + "_" + info.param.id;
                         });

TEST_F(HeadsServer, BadValuesAreInvalidArgumentNamingTheField) {
  const FixtureCase c = Case("cross_attention");  // B=2, T=4, S=6, H=4
  using Edit = std::function<void(v1::ForwardRequest*)>;
  const std::vector<std::pair<Edit, std::vector<std::string>>> table = {
      {[](auto* r) { r->add_weights_heads(4); }, {"weights_heads: head 4", "[0, 4)"}},
      {[](auto* r) { r->add_weights_heads(-1); }, {"weights_heads: head -1", "out of range"}},
      {[](auto* r) { r->add_weights_heads(1), r->add_weights_heads(1); },
       {"weights_heads: head 1 is listed twice"}},
      {[](auto* r) { r->set_weights_top_k(-2); }, {"weights_top_k: -2"}},
      {[](auto* r) { r->set_weights_top_k(7); }, {"weights_top_k: 7", "S'=6"}},
      {[](auto* r) { r->set_weights_query_begin(2), r->set_weights_query_end(2); },
       {"weights_query_end: 2", "empty"}},
      {[](auto* r) { r->set_weights_query_begin(4); }, {"weights_query_begin: 4", "T=4"}},
      {[](auto* r) { r->set_weights_query_end(5); }, {"weights_query_end: 5", "T=4"}},
      {[](auto* r) { r->set_weights_query_begin(-1); }, {"weights_query_begin: -1"}},
      {[](auto* r) { r->set_need_weights(false), r->set_weights_top_k(2); },
       {"weights_top_k", "needs need_weights=true"}},
      {[](auto* r) { r->set_need_weights(false), r->add_weights_heads(0); },
       {"weights_heads", "needs need_weights=true"}},
      {[](auto* r) { r->set_weights_dtype(v1::BOOL); }, {"weights_dtype: bool"}},
      {[](auto* r) { r->set_weights_topk_indices_dtype(v1::FLOAT32); },
       {"weights_topk_indices_dtype: float32", "INT32 or INT64"}},
      {[](auto* r) { *r->mutable_head_mask() = WireFloat({3}); },
       {"head_mask: expected shape [H] = [4] or [B, H] = [2, 4], got [3]"}},
      {[](auto* r) {
         *r->mutable_head_mask() = WireFloat({2, 4, 1});
       },
       {"head_mask", "[2, 4, 1]"}},
      {[](auto* r) { *r->mutable_head_mask() = WireBool({4}); }, {"head_mask: dtype bool"}},
      {[](auto* r) { *r->mutable_head_mask() = WireBytes(v1::INT64, 8, {4}); },
       {"head_mask: dtype int64 is not allowed"}},
  };
  for (const auto& [edit, parts] : table) {
    v1::ForwardRequest r = CaseRequest(c, c.name);
    r.set_need_weights(true);
    edit(&r);
    auto response = client_->ForwardRaw(r);
    ASSERT_FALSE(response.ok()) << parts.front() << ": answered";
    EXPECT_EQ(response.status().code(), StatusCode::kInvalidArgument)
        << response.status().ToString();
    for (const auto& part : parts) EXPECT_TRUE(Contains(response.status().message(), part));
  }
  auto after = client_->ForwardRaw(CaseRequest(c, c.name));  // the server goes on
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(HeadsServer, HeadRequestsAmongMergedPlainRequestsStayExact) {
  const FixtureCase c = Case("self_basic");
  std::vector<HeadRequest> heads;
  for (const auto& h : HeadRequests()) {
    if (h.case_name == "self_basic") heads.push_back(h);
  }
  const TensorMap tensors = HeadTensors("self_basic");
  constexpr int kThreads = 4, kRounds = 3;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = shared_->Client();
      for (int i = 0; i < kRounds * static_cast<int>(heads.size()); ++i) {
        const bool plain = (i + t) % 2 == 0;
        const HeadRequest& h = heads[(i * 5 + t) % heads.size()];
        auto response =
            client->ForwardRaw(plain ? CaseRequest(c, c.name) : HeadForwardRequest(c, h, tensors));
        if (!response.ok()) {
          errors[t] = response.status().ToString();
          return;
        }
        if (plain) {
          ExpectMatchesCase(*response, c, 1e-5);
        } else {
          ExpectMatchesHeadRequest(*response, c, h, tensors);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
}

TEST_F(HeadsServer, ForwardStreamCarriesTheHeadOptionsOfEachMessage) {
  std::vector<FixtureCase> cases;
  std::vector<HeadRequest> heads;
  std::vector<v1::ForwardRequest> requests;
  std::map<std::string, TensorMap> tensors;
  for (const auto& h : HeadRequests()) {
    if (!tensors.count(h.case_name)) tensors[h.case_name] = HeadTensors(h.case_name);
    cases.push_back(Case(h.case_name));
    heads.push_back(h);
    requests.push_back(HeadForwardRequest(cases.back(), h, tensors[h.case_name]));
  }
  std::vector<v1::ForwardResponse> responses;
  const Status status = client_->ForwardStreamRaw(requests, &responses);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(responses.size(), requests.size());
  for (size_t i = 0; i < responses.size(); ++i) {
    SCOPED_TRACE("stream message " + std::to_string(i) + ": " + heads[i].id);
    ExpectMatchesHeadRequest(responses[i], cases[i], heads[i], tensors[heads[i].case_name]);
  }
}

TEST(HeadsBudget, SelectedWeightsAreWhatTheResponseBudgetCounts) {
  // Built-in model E=512, H=8; B=1, T=S=64: output 131072 bytes, dense per-head weights 131072.
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--max-response-bytes", "200000"}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  v1::ForwardRequest dense = SelfAttentionRequest("", 1, 64, 512);
  dense.set_need_weights(true);
  dense.set_average_attn_weights(false);
  auto refused = client.ForwardRaw(dense);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(refused.status().message(), "262144 bytes"));
  EXPECT_TRUE(Contains(refused.status().message(), "weights_top_k"));
  using Edit = std::function<void(v1::ForwardRequest*)>;
  const std::vector<std::pair<Edit, std::vector<int64_t>>> fits = {
      {[](auto* r) { r->set_weights_top_k(8); }, {1, 8, 64, 8}},
      {[](auto* r) { r->add_weights_heads(5); }, {1, 1, 64, 64}},
      {[](auto* r) { r->set_weights_query_begin(63); }, {1, 8, 1, 64}},
      {[](auto* r) { r->set_weights_dtype(v1::FLOAT16), r->add_weights_heads(0); }, {1, 1, 64, 64}},
  };
  for (const auto& [edit, shape] : fits) {
    v1::ForwardRequest r = dense;
    edit(&r);
    auto response = client.ForwardRaw(r);
    ASSERT_TRUE(response.ok()) << response.status().ToString();
    const v1::Tensor& w = response->has_attn_weights() ? response->attn_weights()
                                                       : response->attn_weights_topk_values();
    EXPECT_EQ(codec::ShapeOf(w), shape);
  }
  v1::ForwardRequest stats = SelfAttentionRequest("", 1, 64, 512);
  stats.set_head_stats(true);
  auto answered = client.ForwardRaw(stats);
  ASSERT_TRUE(answered.ok()) << answered.status().ToString();
  EXPECT_EQ(codec::ShapeOf(answered->head_entropy()), (std::vector<int64_t>{1, 8, 64}));
  EXPECT_FALSE(answered->has_attn_weights());
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace heads_test
}  // namespace mha::testing
