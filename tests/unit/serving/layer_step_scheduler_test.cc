// LayerStepScheduler (server/serving/llama/layer_step_scheduler.h) over the fixture stack
// stack4_sessions, passes held at an in-process gate (no timing): messages of one layer with
// disjoint sessions that wait together merge into one pass, a later message of a session waits
// for the earlier one, other layers wait for their own pass, every output equals PyTorch's causal
// forward of the layer (<= 1e-5); a refused entry refuses only its message; the token cap, the
// queue limit, deadlines and shutdown.
#include "server/serving/llama/layer_step_scheduler.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "llama_serving_util.h"

namespace mha::serve {
namespace {

using testing::Contains;

class LayerStepSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    case_ = testing::LoadLlamaCase("stack4_sessions");
    model_ = testing::LoadFixtureModel("stack4_sessions");
    ASSERT_NE(model_.stack, nullptr);
    store_ = std::make_unique<LlamaSessionStore>(testing::SmallPool(1 << 20, 4), model_.stack,
                                                 model_.info, SessionLocation{"llama", "1"},
                                                 std::make_shared<SessionDirectory>(), nullptr);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(store_->Open(128, "s" + std::to_string(i)).ok());
  }
  void Start(LayerStepSchedulerOptions o = {}) {
    o.pass_hook = gate_.Hook();
    scheduler_ = LayerStepScheduler::Create(o, model_.stack, store_.get(), "llama", nullptr);
  }
  // Session `i`'s fixture input (layer 0) or layer output, [T, E].
  at::Tensor Io(int i, const std::string& what) const {
    return case_.Io("s" + std::to_string(i) + "." + what);
  }
  // Submits `hidden` rows for sessions `ids` at `layer`; the answer arrives on the future.
  std::future<LayerStepResponse> Submit(int64_t layer, const std::vector<std::string>& ids,
                                        const std::vector<HostTensor>& hidden,
                                        Clock::time_point deadline = Clock::time_point::max()) {
    auto answer = std::make_shared<std::promise<LayerStepResponse>>();
    auto held = store_->Acquire(ids);
    EXPECT_TRUE(held.ok()) << held.status().ToString();
    LayerStepTask task;
    task.layer = layer;
    task.sessions = held.value();
    task.hidden = hidden;
    task.deadline = deadline;
    task.done = [answer](LayerStepResponse r) { answer->set_value(std::move(r)); };
    scheduler_->Submit(std::move(task));
    return answer->get_future();
  }

  testing::LlamaCase case_;
  LoadedLlamaModel model_;
  std::unique_ptr<LlamaSessionStore> store_;
  testing::PassGate gate_;
  std::unique_ptr<LayerStepScheduler> scheduler_;
};

TEST_F(LayerStepSchedulerTest, WaitingMessagesOfALayerMergeAndEachSessionKeepsItsOrder) {
  Start();
  gate_.Hold();
  // Pass 1 (held): s0's first token at layer 0.
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  // Queued while it runs: s1 at layer 0, s0 at layer 1 (after a), s2 at layer 0.
  auto b = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 2)});
  const at::Tensor s0_layer1 = Io(0, "input") + Io(0, "output.0");  // the fixture's residual
  auto c = Submit(1, {"s0"}, {testing::Rows(s0_layer1, 0, 1)});
  auto d = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 3)});
  gate_.ReleaseAll();
  const LayerStepResponse ra = a.get(), rb = b.get(), rc = c.get(), rd = d.get();
  for (const LayerStepResponse* r : {&ra, &rb, &rc, &rd})
    ASSERT_TRUE(r->status.ok()) << r->status.ToString();
  EXPECT_EQ(ra.pass_messages, 1);
  EXPECT_EQ(rb.pass_messages, 2);  // b and d: layer 0, disjoint sessions
  EXPECT_EQ(rd.pass_messages, 2);
  EXPECT_EQ(rd.pass_entries, 2);
  EXPECT_EQ(rc.pass_messages, 1);  // layer 1: its own pass, after a
  EXPECT_EQ(gate_.entered(), 3);
  EXPECT_EQ(rb.layer_tokens, std::vector<int64_t>{2});
  EXPECT_EQ(rc.layer_tokens, std::vector<int64_t>{1});
  const double tol = testing::kFp32Tolerance;
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(ra.outputs[0]), Io(0, "output.0").narrow(0, 0, 1), tol));
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(rb.outputs[0]), Io(1, "output.0").narrow(0, 0, 2), tol));
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(rc.outputs[0]), Io(0, "output.1").narrow(0, 0, 1), tol));
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(rd.outputs[0]), Io(2, "output.0").narrow(0, 0, 3), tol));
}

TEST_F(LayerStepSchedulerTest, ARefusedEntryRefusesOnlyItsMessage) {
  Start();
  gate_.Hold();
  auto first = Submit(0, {"s3"}, {testing::Rows(Io(3, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  // Both at layer 1 in the next pass: s1 has no layer 0 yet (refused when the pass is prepared),
  // s3 has; s3's message runs.
  auto ahead = Submit(1, {"s2", "s1"},
                      {testing::Rows(Io(2, "input"), 0, 1), testing::Rows(Io(1, "input"), 0, 1)});
  const at::Tensor s3_layer1 = Io(3, "input") + Io(3, "output.0");
  auto other = Submit(1, {"s3"}, {testing::Rows(s3_layer1, 0, 1)});
  gate_.ReleaseAll();
  EXPECT_TRUE(first.get().status.ok());
  const LayerStepResponse r = ahead.get();
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status.message(),
                       "entries[0]: layer 1 would hold 1 tokens, more than layer 0's 0"))
      << r.status.message();
  const LayerStepResponse ro = other.get();
  ASSERT_TRUE(ro.status.ok()) << ro.status.ToString();
  EXPECT_EQ(ro.pass_messages, 1);
  EXPECT_TRUE(testing::TensorsNear(ToTensor(ro.outputs[0]), Io(3, "output.1").narrow(0, 0, 1),
                                   testing::kFp32Tolerance));
  // The refused message changed nothing: s1 and s2 start at layer 0.
  auto later = Submit(0, {"s1", "s2"},
                      {testing::Rows(Io(1, "input"), 0, 1), testing::Rows(Io(2, "input"), 0, 1)});
  const LayerStepResponse ok = later.get();
  ASSERT_TRUE(ok.status.ok()) << ok.status.ToString();
  EXPECT_EQ(ok.layer_tokens, (std::vector<int64_t>{1, 1}));
}

TEST_F(LayerStepSchedulerTest, TheTokenCapKeepsBigMessagesApart) {
  LayerStepSchedulerOptions o;
  o.max_pass_tokens = 4;
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  auto b = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 3)});
  auto c = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 3)});
  gate_.ReleaseAll();
  EXPECT_EQ(a.get().pass_messages, 1);
  EXPECT_EQ(b.get().pass_messages, 1);  // 3 + 3 tokens > 4
  EXPECT_EQ(c.get().pass_messages, 1);
}

TEST_F(LayerStepSchedulerTest, AFullQueueAndExpiredDeadlinesAreAnsweredWithoutAPass) {
  LayerStepSchedulerOptions o;
  o.max_queue_size = 1;
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  auto expired = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 1)}, Clock::now());
  auto full = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 1)});
  const LayerStepResponse rf = full.get();  // answered inline
  EXPECT_EQ(rf.status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(rf.status.message(), "1 layer step messages waiting for model 'llama'"));
  gate_.ReleaseAll();
  EXPECT_TRUE(a.get().status.ok());
  EXPECT_EQ(expired.get().status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(gate_.entered(), 1);
  // Nothing holds s1 or s2 any more: they may step.
  EXPECT_TRUE(Submit(0, {"s1", "s2"},
                     {testing::Rows(Io(1, "input"), 0, 1), testing::Rows(Io(2, "input"), 0, 1)})
                  .get()
                  .status.ok());
}

TEST_F(LayerStepSchedulerTest, ShutdownRunsWhatIsQueuedThenRefuses) {
  Start();
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  auto b = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 1)});
  std::thread stopper([this] { scheduler_->Shutdown(); });
  gate_.ReleaseAll();
  stopper.join();
  EXPECT_TRUE(a.get().status.ok());
  EXPECT_TRUE(b.get().status.ok());
  const LayerStepResponse late = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 1)}).get();
  EXPECT_EQ(late.status.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mha::serve
