// LlamaSessionCache and StepSessions (mha/llama_session.h): 8 sessions of a 4-layer stack, of
// mixed lengths, interleaved (prefill chunks, then 64 single steps each; two groups of sessions a
// layer apart, so passes of different layers alternate): every step of every layer equals the
// rows of PyTorch's full causal forward of that layer's inputs (tests/fixtures/llama/
// stack4_sessions, <= 1e-5 in float32; half precision within docs/afd.md's bound). Also the rule
// that layers advance in order, max_tokens, a short pool, and the memory per KV head.
#include "mha/llama_session.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "llama_test_util.h"
#include "test_util.h"

namespace mha {
namespace llama_session_test {

using testing::Contains;
using testing::LoadLlamaCase;
using testing::LoadLlamaStack;

// One session of the fixture: every layer's input rows and expected output rows, its chunks.
struct Sequence {
  std::vector<at::Tensor> inputs, outputs;  // per layer, [T, E]
  std::vector<int64_t> chunks;              // prefill chunks, then 1s
};

std::vector<Sequence> Sequences(const testing::LlamaCase& c, int64_t layers) {
  std::vector<Sequence> sequences;
  const auto& sessions = c.meta.at("sessions");
  for (size_t i = 0; i < sessions.size(); ++i) {
    Sequence s;
    const std::string key = "s" + std::to_string(i) + ".";
    at::Tensor x = c.Io(key + "input");
    for (int64_t l = 0; l < layers; ++l) {
      s.inputs.push_back(x);
      s.outputs.push_back(c.Io(key + "output." + std::to_string(l)));
      x = x + s.outputs.back();  // the fixture's residual stream, in float32
    }
    s.chunks = sessions[i].at("prefill").get<std::vector<int64_t>>();
    s.chunks.insert(s.chunks.end(), sessions[i].at("steps").get<size_t>(), 1);
    sequences.push_back(std::move(s));
  }
  return sequences;
}

using SessionsParam = std::tuple<std::string, DType, bool>;  // device, dtype, gather

// The fixture's 8 sessions over a stack in the parameter's device and dtype.
class LlamaSessionsTest : public ::testing::TestWithParam<SessionsParam> {
 protected:
  void SetUp() override {
    const auto& [device, dtype, gather] = GetParam();
    fp32_ = dtype == DType::kFloat32;
    attention_ = gather ? StepAttention::kGather : StepAttention::kPerSession;
    const testing::LlamaCase c = LoadLlamaCase("stack4_sessions");
    stack_ = LoadLlamaStack(c, device, dtype);
    ASSERT_NE(stack_, nullptr);
    layers_ = stack_->num_layers();
    ASSERT_EQ(layers_, 4);
    seqs_ = Sequences(c, layers_);
    ASSERT_EQ(seqs_.size(), 8u);
    auto pool = stack_->CreateKvPool(KvPoolOptions{int64_t{4} << 20, /*block_tokens=*/7});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = *pool;
    for (size_t i = 0; i < seqs_.size(); ++i) {
      auto s = LlamaSessionCache::Create({pool_, layers_, stack_->config().max_positions()});
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      sessions_.push_back(std::move(s.value()));
      got_.emplace_back(static_cast<size_t>(layers_));
    }
    next_.assign(seqs_.size(), 0);
    done_.assign(seqs_.size(), 0);
  }

  int64_t Chunk(size_t i) const { return seqs_[i].chunks[next_[i]]; }

  // One pass of `layer` for sessions `who` (their current chunks); checks every output.
  void Pass(int64_t layer, const std::vector<size_t>& who) {
    std::vector<at::Tensor> outs(seqs_.size());
    std::vector<LlamaSessionStep> entries;
    for (size_t i : who) {
      entries.push_back(
          {sessions_[i].get(), seqs_[i].inputs[layer].narrow(0, done_[i], Chunk(i)), &outs[i]});
    }
    std::vector<LlamaStepItem> items;  // what StepSessions passes LlamaLayerStep
    for (const LlamaSessionStep& e : entries) {
      items.push_back({e.session->layer(layer), e.hidden, e.output});
    }
    const bool paged =
        attention_ == StepAttention::kPerSession && LlamaPagedApplies(stack_->config(), items);
    Status s = StepSessions(*stack_, layer, entries, attention_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ++(paged ? paged_passes_ : passes_);
    for (size_t i : who) {
      const int64_t n = Chunk(i);
      chunk_entries_ += n > 1 ? 1 : 0;
      const at::Tensor want = seqs_[i].outputs[layer].narrow(0, done_[i], n);
      const double error =
          fp32_ ? testing::MaxAbsDiff(outs[i], want) : testing::RelativeError(outs[i], want);
      worst_step_ = std::max(worst_step_, error);
      EXPECT_LE(error, fp32_ ? testing::kFp32Tolerance : testing::kLlamaHalfStepRelTolerance)
          << "session " << i << " layer " << layer << " tokens " << done_[i] << ".."
          << done_[i] + n - 1;
      EXPECT_EQ(sessions_[i]->length(layer), done_[i] + n);
      got_[i][static_cast<size_t>(layer)].push_back(outs[i]);
    }
  }

  // Session i starts i rounds late and brings one chunk a round. A round runs L + 1 ticks; at
  // tick k, sessions of even index step layer k and odd ones layer k - 1, each group in one pass.
  void Round(size_t round) {
    std::vector<size_t> active;
    for (size_t i = 0; i < seqs_.size(); ++i) {
      if (round >= i && next_[i] < seqs_[i].chunks.size()) active.push_back(i);
    }
    for (int64_t tick = 0; tick <= layers_; ++tick) {
      for (size_t group = 0; group < 2; ++group) {
        const int64_t layer = tick - static_cast<int64_t>(group);
        std::vector<size_t> who;
        for (size_t i : active) {
          if (i % 2 == group) who.push_back(i);
        }
        if (layer >= 0 && layer < layers_ && !who.empty()) Pass(layer, who);
      }
    }
    for (size_t i : active) done_[i] += seqs_[i].chunks[next_[i]++];
  }

  bool fp32_ = true;
  StepAttention attention_ = StepAttention::kPerSession;
  std::shared_ptr<LlamaAttentionStack> stack_;
  int64_t layers_ = 0;
  std::vector<Sequence> seqs_;
  std::shared_ptr<KvBlockPool> pool_;
  std::vector<std::unique_ptr<LlamaSessionCache>> sessions_;
  std::vector<std::vector<std::vector<at::Tensor>>> got_;  // [session][layer]: step outputs
  std::vector<size_t> next_;                               // each session's next chunk
  std::vector<int64_t> done_;                              // tokens each session has stepped
  int passes_ = 0, paged_passes_ = 0, chunk_entries_ = 0;  // passes_: gathered
  double worst_step_ = 0;
};

// Passes of two layers alternate, and every pass mixes cache lengths, prefill chunks and single
// tokens. Half precision: each step within kLlamaHalfStepRelTolerance, each session's whole
// sequence of a layer within kLlamaHalfRelTolerance.
TEST_P(LlamaSessionsTest, InterleavedStepsEqualEveryLayersCausalForward) {
  for (size_t round = 0; round < 200; ++round) {  // the last session ends in round 74
    Round(round);
    if (HasFatalFailure()) return;
  }
  double worst_sequence = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const int64_t total = seqs_[i].inputs[0].size(0);
    EXPECT_EQ(done_[i], total);
    EXPECT_EQ(next_[i], seqs_[i].chunks.size());
    for (int64_t l = 0; l < layers_; ++l) {
      EXPECT_EQ(sessions_[i]->length(l), total);
      const at::Tensor whole = at::cat(got_[i][static_cast<size_t>(l)], 0);
      const double error = testing::RelativeError(whole, seqs_[i].outputs[l]);
      worst_sequence = std::max(worst_sequence, error);
      if (!fp32_) {
        EXPECT_LE(error, testing::kLlamaHalfRelTolerance) << "session " << i << " layer " << l;
      }
    }
    EXPECT_EQ(sessions_[i]->blocks_held(), layers_ * ((total + 6) / 7));  // pages of 7 tokens
  }
  EXPECT_GT(passes_ + paged_passes_, 8 * 64);
  EXPECT_GT(chunk_entries_, 0);
  // On the CPU in float32 (H / KV = 2) the pages are read in place unless a pass holds a chunk of
  // more than kMaxPagedTokens; CUDA, float16 computed as float16 and kGather always gather.
  const bool cpu_f32 =
      std::get<0>(GetParam()) == "cpu" && stack_->compute_dtype() == DType::kFloat32;
  if (cpu_f32 && attention_ == StepAttention::kPerSession) {
    EXPECT_GT(paged_passes_, 0);
    EXPECT_GT(passes_, 0);  // the passes with chunks of 5
  } else {
    EXPECT_EQ(paged_passes_, 0);
  }
  RecordProperty("worst_step_error", ::testing::PrintToString(worst_step_));
  RecordProperty("worst_sequence_relative_error", ::testing::PrintToString(worst_sequence));
  sessions_.clear();
  EXPECT_EQ(pool_->used_blocks(), 0);
}

std::vector<SessionsParam> SessionsParams() {
  std::vector<SessionsParam> params;
  for (const std::string& device : testing::TestDevices()) {
    params.emplace_back(device, DType::kFloat32, false);
    params.emplace_back(device, DType::kFloat32, true);
    params.emplace_back(device, DType::kFloat16, false);
    params.emplace_back(device, DType::kBFloat16, false);
  }
  return params;
}

std::string SessionsName(const ::testing::TestParamInfo<SessionsParam>& info) {
  const auto& [device, dtype, gather] = info.param;
  return device + "_" + DTypeName(dtype) + (gather ? "_gather" : "");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaSessionsTest, ::testing::ValuesIn(SessionsParams()),
                         SessionsName);

class LlamaSessionCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stack_ = LoadLlamaStack(LoadLlamaCase("stack4_sessions"));  // L=4, E=32, H=4, KV=2, D=8
    ASSERT_NE(stack_, nullptr);
  }
  std::unique_ptr<LlamaSessionCache> Open(int64_t bytes = int64_t{1} << 20, int64_t max = 0) {
    auto pool = stack_->CreateKvPool(KvPoolOptions{bytes, 4});
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    auto s = LlamaSessionCache::Create({pool.ok() ? *pool : nullptr, 4, max});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s.value()) : nullptr;
  }
  Status Step(LlamaSessionCache* s, int64_t layer, int64_t tokens) {
    return StepSessions(*stack_, layer, {{s, at::randn({tokens, 32}), &out_}});
  }

  std::shared_ptr<LlamaAttentionStack> stack_;
  at::Tensor out_;
};

TEST_F(LlamaSessionCacheTest, LayersAdvanceInOrder) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  Status refused = Step(s.get(), 1, 1);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.message(),
                       "entry 0: layer 1 would hold 1 tokens, more than layer "
                       "0's 0: layers advance in order"));
  ASSERT_TRUE(Step(s.get(), 0, 3).ok());
  refused = Step(s.get(), 1, 4);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.message(), "layer 1 would hold 4 tokens, more than layer 0's 3"));
  EXPECT_TRUE(Contains(Step(s.get(), 3, 1).message(),
                       "layer 3 would hold 1 tokens, more than layer 2's 0"));
  ASSERT_TRUE(Step(s.get(), 1, 2).ok());  // layers may lag behind
  ASSERT_TRUE(Step(s.get(), 1, 1).ok());
  EXPECT_TRUE(Contains(Step(s.get(), 1, 1).message(), "layer 1 would hold 4 tokens"));
  EXPECT_EQ(s->length(0), 3);
  EXPECT_EQ(s->length(1), 3);
  EXPECT_EQ(s->length(2), 0);
  EXPECT_EQ(s->blocks_held(), 2);  // refusals took no block: one 4-token page per layer used
  EXPECT_EQ(s->CheckStep(4, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s->CheckStep(4, 1).message(),
                       "layer 4 out of range: the session has 4 layers (0 .. 3)"));
  EXPECT_TRUE(Contains(s->CheckStep(0, 0).message(), "a step brings >= 1 tokens, got 0"));
}

TEST_F(LlamaSessionCacheTest, MaxTokensAndAShortPool) {
  auto capped = Open(int64_t{1} << 20, /*max=*/5);
  ASSERT_NE(capped, nullptr);
  ASSERT_TRUE(Step(capped.get(), 0, 4).ok());
  const Status over = Step(capped.get(), 0, 2);
  EXPECT_EQ(over.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(
      Contains(over.message(), "layer 0 holds 4 tokens + 2 new exceed the session's max_tokens 5"));
  // 2 * KV=2 * D=8 * 4 bytes = 128 bytes per token, 512 per 4-token block: 3 blocks.
  auto short_pool = Open(3 * 512);
  ASSERT_NE(short_pool, nullptr);
  ASSERT_TRUE(Step(short_pool.get(), 0, 8).ok());    // 2 blocks
  const Status full = Step(short_pool.get(), 0, 5);  // 2 more: 1 left
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(full.message(), "entry 0: KV cache full: 2 blocks needed, 1 of 3 free"));
  EXPECT_EQ(short_pool->length(0), 8);
  EXPECT_EQ(short_pool->blocks_held(), 2);
  short_pool->Release();
  EXPECT_EQ(short_pool->blocks_held(), 0);
  EXPECT_EQ(short_pool->length(0), 0);
}

TEST_F(LlamaSessionCacheTest, EntriesAreCheckedBeforeAnythingRuns) {
  auto a = Open(), b = Open();
  ASSERT_TRUE(a && b);
  at::Tensor out0, out1;
  Status twice = StepSessions(
      *stack_, 0, {{a.get(), at::randn({1, 32}), &out0}, {a.get(), at::randn({1, 32}), &out1}});
  EXPECT_TRUE(Contains(twice.message(), "entry 1: the same session as entry 0"));
  Status shape = StepSessions(
      *stack_, 0, {{a.get(), at::randn({1, 32}), &out0}, {b.get(), at::randn({1, 16}), &out1}});
  EXPECT_TRUE(Contains(shape.message(), "entry 1: hidden: expected floating [t >= 1, 32]"));
  EXPECT_EQ(a->length(0), 0);  // nothing ran
  EXPECT_TRUE(Contains(StepSessions(*stack_, 7, {{a.get(), at::randn({1, 32}), &out0}}).message(),
                       "layer 7 out of range: the model has 4 layers"));
  auto pool = stack_->CreateKvPool(KvPoolOptions{int64_t{1} << 20, 4});
  ASSERT_TRUE(pool.ok());
  auto three = LlamaSessionCache::Create({*pool, 3, 0});
  ASSERT_TRUE(three.ok());
  EXPECT_TRUE(
      Contains(StepSessions(*stack_, 0, {{three->get(), at::randn({1, 32}), &out0}}).message(),
               "entry 0: the session has 3 layers, the model 4"));
}

TEST_F(LlamaSessionCacheTest, CreateRefusesBadOptions) {
  auto pool = stack_->CreateKvPool(KvPoolOptions{int64_t{1} << 20, 4});
  ASSERT_TRUE(pool.ok());
  EXPECT_TRUE(Contains(LlamaSessionCache::Create({nullptr, 4, 0}).status().message(),
                       "a KV block pool is required"));
  EXPECT_TRUE(Contains(LlamaSessionCache::Create({*pool, 0, 0}).status().message(),
                       "num_layers must be >= 1, got 0"));
  EXPECT_TRUE(Contains(LlamaSessionCache::Create({*pool, 4, -1}).status().message(),
                       "max_tokens must be >= 0, got -1"));
}

TEST_F(LlamaSessionCacheTest, MemoryIsAccountedPerKeyValueHead) {
  // One session of 4 layers x 10 tokens in 4-token pages: 3 pages per layer of 4 * 128 bytes.
  auto s = Open();
  ASSERT_NE(s, nullptr);
  for (int64_t layer = 0; layer < 4; ++layer) ASSERT_TRUE(Step(s.get(), layer, 10).ok());
  EXPECT_EQ(s->blocks_held(), 4 * 3);
  EXPECT_EQ(s->bytes_held(), 4 * 3 * 4 * 128);
  EXPECT_EQ(s->layer(2)->pool().bytes_per_token(),
            stack_->config().kv_bytes_per_token(/*element_bytes=*/4));
}

}  // namespace llama_session_test
}  // namespace mha
