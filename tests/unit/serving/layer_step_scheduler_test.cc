// LayerStepScheduler (server/serving/kinds/llama/layer_step_scheduler.h) over the fixture stack
// stack4_sessions, passes held at an in-process gate (no timing): messages of one layer with
// disjoint sessions that wait together merge into one pass, a later message of a session waits
// (at the session gate) for the earlier one, other layers wait for their own pass, stateless
// forwards share the one queue and run alone, every output equals PyTorch's causal
// forward of the layer (<= 1e-5); a refused entry refuses only its message; the token cap, the
// queue limit, deadlines and shutdown; and what it shares with every scheduler (the queue-depth
// gauge, drops on the pass-time estimate, off-worker completion, instances).
#include "server/serving/kinds/llama/layer_step_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "llama_serving_util.h"
#include "server/serving/observability/stats_aggregator.h"

namespace mha::serve {
namespace {

using testing::Contains;
using testing::GetWithin;

class LayerStepSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    case_ = testing::LoadLlamaCase("stack4_sessions");
    model_ = testing::LoadFixtureModel("stack4_sessions");
    ASSERT_NE(model_.stack, nullptr);
    store_ = std::make_unique<LlamaSessions>(
        testing::SmallPool(1 << 20, 4), RequestLimits{}, model_.stack, model_.info,
        SessionLocation{"llama", "1"}, std::make_shared<SessionDirectory>(), nullptr);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(testing::OpenLlama(*store_, 128, "s" + std::to_string(i)).ok());
    }
  }
  void Start(BatcherOptions o = {}) {
    scheduler_.reset();  // a test may start a second one: the first drains
    o.pass_hook = [this, gate = gate_.Hook()](const std::function<Status()>& pass) {
      pass_thread_ = std::this_thread::get_id();
      return gate(pass);
    };
    scheduler_ = LayerStepScheduler::Create(o, model_.stack, store_.get(), "llama", &stats_);
  }
  // Session `i`'s fixture input (layer 0) or layer output, [T, E].
  at::Tensor Io(int i, const std::string& what) const {
    return case_.Io("s" + std::to_string(i) + "." + what);
  }
  // Submits `hidden` rows for sessions `ids` at `layer`; the answer arrives on the future.
  std::future<LayerStepResponse> Submit(int64_t layer, const std::vector<std::string>& ids,
                                        const std::vector<HostTensor>& hidden,
                                        Clock::time_point deadline = Clock::time_point::max(),
                                        std::thread::id* answered_on = nullptr) {
    auto answer = std::make_shared<std::promise<LayerStepResponse>>();
    auto task = std::make_shared<LayerStepTask>();
    task->layer = layer;
    task->hidden = hidden;
    task->deadline = deadline;
    task->done = [answer, answered_on](LayerStepResponse r) {
      if (answered_on) *answered_on = std::this_thread::get_id();
      answer->set_value(std::move(r));
    };
    // As LlamaServed::StepLayer: the message reaches the scheduler when its turn comes.
    const Status entered = store_->Acquire(
        ids, [](size_t i) { return "entries[" + std::to_string(i) + "].session_id: "; },
        [this, task](LlamaSessions::Hold hold, CallerThread&) {
          task->hold = std::move(hold);
          scheduler_->Submit(std::move(*task));
        },
        [task](Status why) {
          LayerStepResponse r;
          r.status = std::move(why);
          task->done(std::move(r));
        },
        testing::Worker());
    EXPECT_TRUE(entered.ok()) << entered.ToString();
    return answer->get_future();
  }
  // A stateless forward of `layer` over [1, T, E] `query`.
  std::future<InferenceResult> Forward(int64_t layer, const at::Tensor& query) {
    auto answer = std::make_shared<std::promise<InferenceResult>>();
    InferenceTask task;
    task.layer = layer;
    task.inputs.query = ToHost(query.unsqueeze(0).contiguous());
    scheduler_->SubmitForward(std::move(task),
                              [answer](InferenceResult r) { answer->set_value(std::move(r)); });
    return answer->get_future();
  }

  testing::LlamaCase case_;
  LoadedLlamaModel model_;
  std::unique_ptr<LlamaSessions> store_;
  StatsAggregator stats_{"llama", "1"};
  std::atomic<std::thread::id> pass_thread_{};  // the worker that ran the latest pass
  std::unique_ptr<LayerStepScheduler> scheduler_;
  // After the scheduler: destroyed first, it lets go the passes a failed test left held, which
  // the scheduler's destructor would otherwise wait for.
  testing::PassGate gate_;
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
  const LayerStepResponse ra = GetWithin(a), rb = GetWithin(b), rc = GetWithin(c),
                          rd = GetWithin(d);
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

TEST_F(LayerStepSchedulerTest, WithBatchingOffEachMessageRunsAlone) {
  BatcherOptions o;
  o.batching = false;  // --batching off
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  // Queued while it runs: two messages of layer 0 over disjoint sessions, which merge when
  // batching is on (above); here each runs in a pass of its own.
  auto b = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 2)});
  auto d = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 3)});
  gate_.ReleaseAll();
  const LayerStepResponse ra = GetWithin(a), rb = GetWithin(b), rd = GetWithin(d);
  for (const LayerStepResponse* r : {&ra, &rb, &rd}) {
    ASSERT_TRUE(r->status.ok()) << r->status.ToString();
    EXPECT_EQ(r->pass_messages, 1);
  }
  EXPECT_EQ(gate_.entered(), 3);
  const double tol = testing::kFp32Tolerance;
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
  EXPECT_TRUE(GetWithin(first).status.ok());
  const LayerStepResponse r = GetWithin(ahead);
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status.message(),
                       "entries[0]: layer 1 would hold 1 tokens, more than layer 0's 0"))
      << r.status.message();
  const LayerStepResponse ro = GetWithin(other);
  ASSERT_TRUE(ro.status.ok()) << ro.status.ToString();
  EXPECT_EQ(ro.pass_messages, 1);
  EXPECT_TRUE(testing::TensorsNear(ToTensor(ro.outputs[0]), Io(3, "output.1").narrow(0, 0, 1),
                                   testing::kFp32Tolerance));
  // The refused message changed nothing: s1 and s2 start at layer 0.
  auto later = Submit(0, {"s1", "s2"},
                      {testing::Rows(Io(1, "input"), 0, 1), testing::Rows(Io(2, "input"), 0, 1)});
  const LayerStepResponse ok = GetWithin(later);
  ASSERT_TRUE(ok.status.ok()) << ok.status.ToString();
  EXPECT_EQ(ok.layer_tokens, (std::vector<int64_t>{1, 1}));
}

TEST_F(LayerStepSchedulerTest, TheTokenCapKeepsBigMessagesApart) {
  BatcherOptions o;
  o.max_batch_tokens = 4;
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  auto b = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 3)});
  auto c = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 3)});
  gate_.ReleaseAll();
  EXPECT_EQ(GetWithin(a).pass_messages, 1);
  EXPECT_EQ(GetWithin(b).pass_messages, 1);  // 3 + 3 tokens > 4
  EXPECT_EQ(GetWithin(c).pass_messages, 1);
}

TEST_F(LayerStepSchedulerTest, AFullQueueAndExpiredDeadlinesAreAnsweredWithoutAPass) {
  BatcherOptions o;
  o.max_queue_size = 1;
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  auto expired = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 1)}, Clock::now());
  auto full = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 1)});
  const LayerStepResponse rf = GetWithin(full);  // answered inline
  EXPECT_EQ(rf.status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(rf.status.message(), "1 requests waiting for model 'llama'"));
  gate_.ReleaseAll();
  EXPECT_TRUE(GetWithin(a).status.ok());
  EXPECT_EQ(GetWithin(expired).status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(gate_.entered(), 1);
  // Nothing holds s1 or s2 any more: they may step.
  EXPECT_TRUE(
      GetWithin(Submit(0, {"s1", "s2"},
                       {testing::Rows(Io(1, "input"), 0, 1), testing::Rows(Io(2, "input"), 0, 1)}))
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
  EXPECT_TRUE(GetWithin(a).status.ok());
  EXPECT_TRUE(GetWithin(b).status.ok());
  const LayerStepResponse late =
      GetWithin(Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 1)}));
  EXPECT_EQ(late.status.code(), StatusCode::kUnavailable);
}

// What the layer steps now share with every scheduler (scheduling/work_queue.h).

TEST_F(LayerStepSchedulerTest, TheQueueDepthGaugeCountsTheMessagesWaiting) {
  Start();
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  EXPECT_EQ(stats_.Read().queue_depth, 0);
  auto b = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 1)});
  auto c = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 1)});
  EXPECT_EQ(stats_.Read().queue_depth, 2);
  gate_.ReleaseAll();
  for (auto* f : {&a, &b, &c}) EXPECT_TRUE(GetWithin(*f).status.ok());
  EXPECT_EQ(stats_.Read().queue_depth, 0);
  EXPECT_EQ(stats_.Read().execution_count, 2);  // a alone, then b and c merged
}

TEST_F(LayerStepSchedulerTest, AMessageWhosePassWouldOutliveItsDeadlineIsDroppedBeforeIt) {
  BatcherOptions o;
  o.estimate_pass_us = [](bool session, int64_t) { return session ? 1e8 : 0.0; };  // 100 s
  Start(o);
  const LayerStepResponse late = GetWithin(Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)},
                                                  Clock::now() + std::chrono::seconds(30)));
  EXPECT_EQ(late.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(late.status.message(),
                       "dropped before the layer step: the deadline would pass during it "
                       "(estimated 100000000 us"))
      << late.status.message();
  EXPECT_EQ(gate_.entered(), 0);
  // Without a deadline the estimate does not matter; the dropped message held s0 no longer.
  EXPECT_TRUE(GetWithin(Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)})).status.ok());
}

TEST_F(LayerStepSchedulerTest, BigAnswersAreDeliveredOffTheWorkerSmallOnesOnIt) {
  Start();  // the default inline limit: one [1, E] answer is small
  std::thread::id answered;
  ASSERT_TRUE(GetWithin(Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)},
                               Clock::time_point::max(), &answered))
                  .status.ok());
  EXPECT_EQ(answered, pass_thread_.load());
  BatcherOptions o;
  o.inline_completion_max_bytes = 0;  // every answer with an output is "big"
  Start(o);
  ASSERT_TRUE(GetWithin(Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 1)},
                               Clock::time_point::max(), &answered))
                  .status.ok());
  EXPECT_NE(answered, pass_thread_.load());
  EXPECT_NE(answered, std::thread::id());
}

TEST_F(LayerStepSchedulerTest, InstancesRunDisjointSessionsAtOnceAndKeepEachSessionsOrder) {
  BatcherOptions o;
  o.instances = 3;
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  // s0's next layer waits for a's pass although an instance is free; s1's runs beside a.
  const at::Tensor s0_layer1 = Io(0, "input") + Io(0, "output.0");
  auto b = Submit(1, {"s0"}, {testing::Rows(s0_layer1, 0, 1)});
  auto c = Submit(0, {"s1"}, {testing::Rows(Io(1, "input"), 0, 2)});
  ASSERT_TRUE(gate_.WaitEntered(2));  // two passes inside the gate at once: a and c
  gate_.ReleaseAll();
  const LayerStepResponse ra = GetWithin(a), rb = GetWithin(b), rc = GetWithin(c);
  for (const LayerStepResponse* r : {&ra, &rb, &rc}) {
    ASSERT_TRUE(r->status.ok()) << r->status.ToString();
    EXPECT_EQ(r->pass_messages, 1);
  }
  const double tol = testing::kFp32Tolerance;
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(rb.outputs[0]), Io(0, "output.1").narrow(0, 0, 1), tol));
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(rc.outputs[0]), Io(1, "output.0").narrow(0, 0, 2), tol));
  EXPECT_EQ(gate_.entered(), 3);
}

// One queue per version: stateless forwards wait in the queue the layer steps use (one gauge, one
// limit), run alone, and equal PyTorch's causal forward of the layer.
TEST_F(LayerStepSchedulerTest, StatelessForwardsShareTheQueueAndRunAlone) {
  BatcherOptions o;
  o.max_queue_size = 2;
  Start(o);
  gate_.Hold();
  auto a = Submit(0, {"s0"}, {testing::Rows(Io(0, "input"), 0, 1)});
  ASSERT_TRUE(gate_.WaitEntered(1));
  auto f = Forward(0, Io(1, "input"));
  auto b = Submit(0, {"s2"}, {testing::Rows(Io(2, "input"), 0, 1)});
  EXPECT_EQ(stats_.Read().queue_depth, 2);  // the forward and b, in one queue
  const InferenceResult full = GetWithin(Forward(1, Io(1, "input")));
  EXPECT_EQ(full.status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(full.status.message(), "2 requests waiting for model 'llama'"))
      << full.status.message();
  gate_.ReleaseAll();
  ASSERT_TRUE(GetWithin(a).status.ok());
  const InferenceResult rf = GetWithin(f);
  ASSERT_TRUE(rf.status.ok()) << rf.status.ToString();
  EXPECT_TRUE(testing::TensorsNear(ToTensor(rf.outputs.output), Io(1, "output.0").unsqueeze(0),
                                   testing::kFp32Tolerance));
  const LayerStepResponse rb = GetWithin(b);
  ASSERT_TRUE(rb.status.ok()) << rb.status.ToString();
  EXPECT_EQ(rb.pass_messages, 1);  // the forward ran alone between a and b
  EXPECT_EQ(gate_.entered(), 3);
}

}  // namespace
}  // namespace mha::serve
