// mha.v1 LayerSteps against a real mha-server (docs/afd.md): the fixture's 8 sessions of a
// 4-layer stack, prefill chunks then 64 single steps, stepped through two streams whose messages of
// different layers interleave (on each stream and across them), every output equal to PyTorch's
// causal forward of the layer (<= 1e-5); refusals answered in place while the stream goes on;
// messages of one layer from several streams merged into one pass (held at the test server's
// gate, no timing).
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "afd_test_util.h"
#include "client/bench/afd_bench.h"

namespace mha::testing {
namespace layer_steps_test {

// One session of the fixture: its layer-0 input, each layer's expected output, its chunks.
struct Sequence {
  std::string id;
  at::Tensor input;
  std::vector<at::Tensor> outputs;
  std::vector<int64_t> chunks;
  int64_t done = 0;
  at::Tensor x;  // this chunk's rows at the next layer
};

std::vector<Sequence> Sequences(const LlamaCase& c) {
  std::vector<Sequence> out;
  const auto& meta = c.meta.at("sessions");
  for (size_t i = 0; i < meta.size(); ++i) {
    Sequence s;
    const std::string key = "s" + std::to_string(i) + ".";
    s.input = c.Io(key + "input");
    for (int l = 0; l < 4; ++l) s.outputs.push_back(c.Io(key + "output." + std::to_string(l)));
    s.chunks = meta[i].at("prefill").get<std::vector<int64_t>>();
    s.chunks.insert(s.chunks.end(), meta[i].at("steps").get<size_t>(), 1);
    out.push_back(std::move(s));
  }
  return out;
}

// A group of sessions stepped together, `lag` layers behind its stream's first group.
struct Group {
  std::vector<size_t> members;
  int lag = 0;
};

class LayerStepsTest : public ::testing::Test {
 protected:
  // Sends message `layer` of `group` for its sessions still in round `round`; false when none.
  bool Send(client::AttentionClient::LayerStepsRW* stream, std::vector<Sequence>& seqs,
            const Group& group, size_t round, int64_t layer) {
    std::vector<std::string> ids;
    std::vector<at::Tensor> rows;
    for (size_t i : group.members) {
      Sequence& s = seqs[i];
      if (round >= s.chunks.size()) continue;
      if (layer == 0) s.x = s.input.narrow(0, s.done, s.chunks[round]);
      ids.push_back(s.id);
      rows.push_back(s.x);
    }
    if (ids.empty()) return false;
    EXPECT_TRUE(stream->Write(
        StepMessage("r" + std::to_string(round) + "l" + std::to_string(layer), layer, ids, rows)));
    return true;
  }
  // Reads the answer to Send(.., round, layer) and checks every output against the fixture.
  void Check(client::AttentionClient::LayerStepsRW* stream, std::vector<Sequence>& seqs,
             const Group& group, size_t round, int64_t layer) {
    v1::LayerStepResponse r;
    ASSERT_TRUE(stream->Read(&r));
    ASSERT_FALSE(r.has_error()) << r.error().message();
    EXPECT_EQ(r.id(), "r" + std::to_string(round) + "l" + std::to_string(layer));
    int k = 0;
    for (size_t i : group.members) {
      Sequence& s = seqs[i];
      if (round >= s.chunks.size()) continue;
      const int64_t n = s.chunks[round];
      const at::Tensor out = FromWire(r.outputs(k));
      EXPECT_EQ(r.layer_tokens(k), s.done + n);
      EXPECT_TRUE(TensorsNear(out, s.outputs[layer].narrow(0, s.done, n), kFp32Tolerance))
          << "session " << i << " layer " << layer << " tokens " << s.done << "+" << n;
      s.x = s.x + out;  // the fixture's residual stream
      ++k;
    }
    ASSERT_EQ(k, r.outputs_size());
  }

  AfdServer server_;
};

// Stream 1 carries groups A (sessions 0, 4) and B (2, 6, one layer behind), stream 2 groups C
// (1, 5, one layer behind) and D (3, 7): at every tick each stream has two messages of different
// layers in flight, and the streams' messages of one layer meet in the server's queue.
TEST_F(LayerStepsTest, EightSessionsOnTwoStreamsEqualEveryLayersCausalForward) {
  ASSERT_TRUE(server_.Start({"--stream-window", "4"}));
  auto client = server_.Client();
  std::vector<Sequence> seqs = Sequences(LoadLlamaCase("stack4_sessions"));
  ASSERT_EQ(seqs.size(), 8u);
  for (Sequence& s : seqs) s.id = OpenOn(*client, "llama");
  const std::vector<std::vector<Group>> streams = {{{{0, 4}, 0}, {{2, 6}, 1}},
                                                   {{{1, 5}, 1}, {{3, 7}, 0}}};
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<client::AttentionClient::LayerStepsRW>> rw;
  for (size_t k = 0; k < streams.size(); ++k) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    rw.push_back(client->OpenLayerSteps(contexts.back().get()));
  }
  for (size_t round = 0; round < 69; ++round) {  // the longest session has 4 + 64 chunks
    for (int64_t tick = 0; tick <= 4; ++tick) {
      std::vector<std::vector<std::pair<const Group*, int64_t>>> sent(streams.size());
      for (size_t k = 0; k < streams.size(); ++k) {
        for (const Group& g : streams[k]) {
          const int64_t layer = tick - g.lag;
          if (layer >= 0 && layer < 4 && Send(rw[k].get(), seqs, g, round, layer)) {
            sent[k].emplace_back(&g, layer);
          }
        }
      }
      for (size_t k = 0; k < streams.size(); ++k) {
        for (const auto& [g, layer] : sent[k]) {
          Check(rw[k].get(), seqs, *g, round, layer);
          if (HasFatalFailure()) return;
        }
      }
    }
    for (Sequence& s : seqs) {
      if (round < s.chunks.size()) s.done += s.chunks[round];
    }
  }
  for (auto& stream : rw) {
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  for (const Sequence& s : seqs) {
    EXPECT_EQ(s.done, s.input.size(0));
    auto closed = client->CloseSession(s.id);
    ASSERT_TRUE(closed.ok());
    EXPECT_EQ(closed->tokens(), s.done);
  }
}

TEST_F(LayerStepsTest, RefusalsAreAnsweredInPlaceAndTheStreamGoesOn) {
  ASSERT_TRUE(server_.Start({}));
  auto client = server_.Client();
  const std::string a = OpenOn(*client, "llama"), b = OpenOn(*client, "llama");
  const std::string few = OpenOn(*client, "llama", /*max_tokens=*/2);
  const std::string g = OpenOn(*client, "gqa");
  v1::OpenSessionRequest mha_open;
  mha_open.set_model("mha");
  auto m = client->OpenSession(mha_open);
  ASSERT_TRUE(m.ok());
  const at::Tensor one = at::randn({1, 32});
  v1::LayerStepRequest bool_hidden = StepMessage("bool", 0, {a}, {one});
  *bool_hidden.mutable_entries(0)->mutable_hidden() = WireBytes(v1::BOOL, 1, {1, 32});
  struct Case {
    v1::LayerStepRequest message;
    StatusCode code;
    std::string words;
  };
  const std::vector<Case> cases = {
      {StepMessage("unknown", 0, {a, "nope"}, {one, one}), StatusCode::kNotFound,
       "entries[1].session_id: session 'nope' is unknown"},
      {StepMessage("one-layer", 0, {m->session_id()}, {one}), StatusCode::kInvalidArgument,
       "does not offer layer steps (LayerSteps)"},
      {StepMessage("two-models", 0, {a, g}, {one, at::randn({1, 64})}),
       StatusCode::kInvalidArgument, "is on model 'gqa' version 1, entries[0]'s on model 'llama'"},
      {StepMessage("shape", 0, {a}, {at::randn({2, 31})}), StatusCode::kInvalidArgument,
       "entries[0].hidden: expected floating [t >= 1, 32] (new tokens, hidden_size), got [2, 31]"},
      {StepMessage("twice", 0, {a, a}, {one, one}), StatusCode::kInvalidArgument,
       "is also entries[0]: one entry per session"},
      {StepMessage("layer", 4, {a}, {one}), StatusCode::kInvalidArgument,
       "layer: 4 out of range: model 'llama' has 4 layers (0 .. 3)"},
      {StepMessage("order", 1, {a}, {one}), StatusCode::kFailedPrecondition,
       "entries[0]: layer 1 would hold 1 tokens, more than layer 0's 0"},
      {StepMessage("long", 0, {a}, {at::randn({513, 32})}), StatusCode::kResourceExhausted,
       "entries[0].hidden: 513 new tokens exceed --max-sequence-length 512"},
      {StepMessage("max_tokens", 0, {few}, {at::randn({3, 32})}), StatusCode::kOutOfRange,
       "layer 0 holds 0 tokens + 3 new exceed the session's max_tokens 2"},
      {bool_hidden, StatusCode::kInvalidArgument, "entries[0].hidden: dtype bool is not allowed"},
  };
  grpc::ClientContext context;
  auto stream = client->OpenLayerSteps(&context);
  for (const Case& c : cases) {
    ASSERT_TRUE(stream->Write(c.message)) << c.message.id();
    v1::LayerStepResponse r;
    ASSERT_TRUE(stream->Read(&r)) << c.message.id();
    EXPECT_EQ(r.id(), c.message.id());
    ASSERT_TRUE(r.has_error()) << c.message.id();
    EXPECT_EQ(r.error().code(), static_cast<int32_t>(c.code))
        << c.message.id() << ": " << r.error().message();
    EXPECT_TRUE(Contains(r.error().message(), c.words))
        << c.message.id() << ": " << r.error().message();
    EXPECT_EQ(r.outputs_size(), 0);
  }
  // Nothing moved: a's layer 0 then layer 1 step now, and the stream ends OK.
  for (int64_t layer : {0, 1}) {
    ASSERT_TRUE(stream->Write(StepMessage("ok", layer, {a, b}, {at::randn({2, 32}), one})));
    v1::LayerStepResponse r;
    ASSERT_TRUE(stream->Read(&r));
    ASSERT_FALSE(r.has_error()) << r.error().message();
    EXPECT_EQ(r.layer_tokens(0), 2);
    EXPECT_EQ(r.layer_tokens(1), 1);
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  auto health = client->CheckHealth();
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

// Three streams send a layer-0 message each while the first one's pass is held: the two that
// waited together run as one pass (pass_messages 2, pass_entries 3).
TEST_F(LayerStepsTest, MessagesOfOneLayerFromSeveralStreamsMergeIntoOnePass) {
  HoldGate gate;
  ASSERT_TRUE(server_.Start({}, &gate));
  auto client = server_.Client();
  const std::string a = OpenOn(*client, "llama"), b = OpenOn(*client, "llama");
  const std::string c = OpenOn(*client, "llama"), d = OpenOn(*client, "llama");
  gate.Hold();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<client::AttentionClient::LayerStepsRW>> rw;
  const std::vector<std::vector<std::string>> sessions = {{a}, {b}, {c, d}};
  for (size_t k = 0; k < sessions.size(); ++k) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    rw.push_back(client->OpenLayerSteps(contexts.back().get()));
    std::vector<at::Tensor> rows(sessions[k].size(), at::randn({1, 32}));
    ASSERT_TRUE(rw.back()->Write(StepMessage("s" + std::to_string(k), 0, sessions[k], rows)));
    if (k == 0) {
      ASSERT_TRUE(gate.WaitEntered(1));
    }
  }
  const std::string inflight = "mha_inflight_requests{model=\"llama\"}";
  EXPECT_TRUE(WaitUntil([&] { return ScrapeMetric(server_.metrics_port, inflight) >= 3; },
                        "3 messages in flight", kWaitTimeout, std::chrono::milliseconds(2)));
  ASSERT_EQ(ScrapeMetric(server_.metrics_port, inflight), 3);
  gate.ReleaseAll();
  std::vector<v1::LayerStepResponse> answers(3);
  for (size_t k = 0; k < rw.size(); ++k) {
    ASSERT_TRUE(rw[k]->Read(&answers[k]));
    ASSERT_FALSE(answers[k].has_error()) << answers[k].error().message();
    rw[k]->WritesDone();
    EXPECT_TRUE(rw[k]->Finish().ok());
  }
  EXPECT_EQ(answers[0].pass_messages(), 1);
  EXPECT_EQ(answers[1].pass_messages(), 2);
  EXPECT_EQ(answers[2].pass_messages(), 2);
  EXPECT_EQ(answers[2].pass_entries(), 3);
  EXPECT_FALSE(gate.Entered(3));
}

// mha-client afd's driver (client/afd_bench.h) against the fixture stack: every layer of every
// step answered, the counts add up, and a model that is not a stack is refused before anything.
TEST_F(LayerStepsTest, TheAfdDriverStepsEveryLayerOfEverySession) {
  ASSERT_TRUE(server_.Start({}));
  auto client = server_.Client();
  client::AfdBenchOptions o;
  o.model = "llama";
  o.sessions = 5;
  o.streams = 2;
  o.steps = 6;
  o.prefill = 5;
  o.prefill_chunk = 2;  // chunks of 2, 2, 1
  auto r = client::RunAfdBench(*client, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first_error, "");
  EXPECT_EQ(r->failed_steps, 0);
  EXPECT_EQ(r->failed_messages, 0);
  EXPECT_EQ(r->layers, 4);
  EXPECT_EQ(r->steps, 5 * 6);
  EXPECT_EQ(r->messages, 2 * (3 + 6) * 4);  // streams x (prefill chunks + steps) x layers
  ASSERT_EQ(r->per_layer.size(), 4u);
  for (const client::LatencyStats& l : r->per_layer) EXPECT_EQ(l.count, 2 * 6);
  EXPECT_GE(r->mean_pass_entries, 2.0);  // each stream's message holds 2 or 3 sessions
  o.model = "mha";
  auto refused = client::RunAfdBench(*client, o);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.status().message(), "not a Llama model (multihead_attention)"));
}

// mha-client afd --shm (client/afd_stream.h): the hidden states and outputs through shared-memory
// regions registered through the Open Inference Protocol give the same outputs as in-band (one
// stream, so that both runs make the same passes), and without --allow-client-shm the driver is
// refused before it steps anything.
TEST_F(LayerStepsTest, TheAfdDriverThroughSharedMemoryGetsTheInBandOutputs) {
  ASSERT_TRUE(server_.Start({"--allow-client-shm=true"}));
  auto client = server_.Client();
  client::AfdBenchOptions o;
  o.model = "llama";
  o.sessions = 3;
  o.steps = 4;
  o.prefill = 5;
  o.prefill_chunk = 2;
  auto in_band = client::RunAfdBench(*client, o);
  ASSERT_TRUE(in_band.ok()) << in_band.status().ToString();
  o.shm = true;
  auto shm = client::RunAfdBench(*client, o);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  EXPECT_EQ(shm->first_error, "");
  EXPECT_EQ(shm->failed_messages, 0);
  EXPECT_EQ(shm->messages, in_band->messages);
  EXPECT_NE(in_band->output_sum, 0.0);
  EXPECT_NEAR(shm->output_sum, in_band->output_sum, 1e-6 * std::abs(in_band->output_sum) + 1e-6);
  AfdServer without;  // registration off
  ASSERT_TRUE(without.Start({}));
  auto refused = client::RunAfdBench(*without.Client(), o);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(refused.status().message(), "--allow-client-shm=true"))
      << refused.status().ToString();
}

}  // namespace layer_steps_test
}  // namespace mha::testing
