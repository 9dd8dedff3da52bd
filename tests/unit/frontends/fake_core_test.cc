// FakeCore (fake_core.h), the front-end tests' serving core: what it answers, and its hold, which
// must never outlive its scope. A Holding that goes out of scope without the test answering the
// held calls (an assertion that ended the test early) answers them itself, so that the gRPC
// streams and futures waiting on them finish instead of hanging until ctest's timeout.
#include "fake_core.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "mha/tensor_adapter.h"
#include "wait.h"

namespace mha::serve {
namespace fake_core_test {

using namespace std::chrono_literals;
using mha::testing::GetWithin;

InferenceRequest Marked(float marker) {
  InferenceRequest request;
  request.model = "m";
  request.inputs.query = ToHost(at::full({1, 2, 4}, marker));
  return request;
}

// Infer on `core`, the answer through a future.
std::future<InferenceResponse> Call(FakeCore& core, float marker) {
  auto answer = std::make_shared<std::promise<InferenceResponse>>();
  std::future<InferenceResponse> future = answer->get_future();
  core.Infer(Marked(marker), [answer](InferenceResponse r) { answer->set_value(std::move(r)); });
  return future;
}

float First(const InferenceResponse& r) {
  return ToTensor(r.outputs.output).flatten()[0].item<float>();
}

TEST(FakeCoreTest, AnswersTwiceTheQueryOrTheNegativeMarkersError) {
  FakeCore core;
  const InferenceResponse ok = GetWithin(Call(core, 1.5f));
  ASSERT_TRUE(ok.status.ok()) << ok.status.ToString();
  EXPECT_FLOAT_EQ(First(ok), 3.0f);
  const InferenceResponse bad = GetWithin(Call(core, -1.0f));
  EXPECT_EQ(bad.status.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(core.InferCalls(), 2);
}

TEST(FakeCoreTest, HeldCallsWaitUntilTheTestAnswersThem) {
  FakeCore core;
  const auto hold = core.Hold();
  std::vector<std::future<InferenceResponse>> answers;
  for (float marker : {1.0f, 2.0f}) answers.push_back(Call(core, marker));
  // Infer returned without answering: held (no timing involved, the fake answers on the caller's
  // thread or not at all).
  EXPECT_EQ(core.HeldCalls(), 2u);
  for (auto& a : answers) EXPECT_EQ(a.wait_for(0s), std::future_status::timeout);
  ASSERT_TRUE(core.AnswerHeldInReverse(2));
  EXPECT_FLOAT_EQ(First(GetWithin(answers[0])), 2.0f);
  EXPECT_FLOAT_EQ(First(GetWithin(answers[1])), 4.0f);
}

TEST(FakeCoreTest, AHoldDestroyedWithoutReleaseLetsTheHeldCallsFinish) {
  FakeCore core;
  std::future<InferenceResponse> held;
  {
    const auto hold = core.Hold();
    held = Call(core, 3.0f);
    ASSERT_EQ(core.HeldCalls(), 1u);
    ASSERT_EQ(held.wait_for(0s), std::future_status::timeout);
  }  // what an assertion failing here would do: the hold goes out of scope, nothing answered
  EXPECT_EQ(core.HeldCalls(), 0u);
  const InferenceResponse r = GetWithin(held, "the held call's answer");
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_FLOAT_EQ(First(r), 6.0f);
  // And it holds no more: the next call is answered at once.
  EXPECT_EQ(Call(core, 1.0f).wait_for(0s), std::future_status::ready);
}

TEST(FakeCoreTest, AMovedHoldReleasesOnceWhenItsLastOwnerGoes) {
  FakeCore core;
  std::future<InferenceResponse> held;
  {
    auto first = core.Hold();
    {
      FakeCore::Holding second = std::move(first);
      held = Call(core, 1.0f);
    }  // `second` released; `first` no longer owns the hold
    EXPECT_EQ(held.wait_for(0s), std::future_status::ready);
  }
  EXPECT_FLOAT_EQ(First(GetWithin(held)), 2.0f);
}

}  // namespace fake_core_test
}  // namespace mha::serve
