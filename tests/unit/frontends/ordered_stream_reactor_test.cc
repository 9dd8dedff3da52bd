// OrderedStreamReactor (server/frontends/common/ordered_stream.h) on a real in-process gRPC
// server, with a test policy: messages are LayerStepRequests whose id is echoed, a negative layer
// does not decode, and the work a message starts is held by the test (Runner) until it answers
// it, in any order. Answers are written in message order whatever order the work ends in; at most
// `window` messages are in the work at once; a failing message ends the stream after the answers
// before it (kErrorsEndStream) or is answered in its place (not); a cancelled stream ends
// CANCELLED only once the work it started has answered. No timing: every wait is on an event.
// Every case runs on both APIs a stream is served on: the callback API's reactor and the
// completion-queue API's (CqBidiReactor on a CqQueue, cq_stream.h).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/ordered_stream.h"
#include "server/frontends/cq/cq_queue.h"
#include "server/frontends/cq/cq_stream.h"
#include "wait.h"

namespace mha::serve {
namespace {

// The work the reactor runs, held until the test answers it; remembers the most held at once.
class Runner {
 public:
  struct Held {
    std::string id;
    std::function<void(Status)> done;
  };
  void Add(Held held) {
    std::unique_lock<std::mutex> lock(mu_);
    if (auto_answer_) {
      lock.unlock();
      return held.done(Status::Ok());
    }
    held_.push_back(std::move(held));
    most_ = std::max(most_, held_.size());
    cv_.notify_all();
  }
  void AutoAnswer() {
    std::lock_guard<std::mutex> lock(mu_);
    auto_answer_ = true;
  }
  // Waits until `n` messages are held.
  ::testing::AssertionResult WaitHeld(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, testing::kWaitTimeout, [&] { return held_.size() >= n; })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << held_.size() << " messages held, " << n << " expected";
  }
  // Answers the held message `id` with `status`. (Messages reach the work in any order: the
  // next one is read while the previous one is submitted.)
  void Answer(const std::string& id, const Status& status = Status::Ok()) {
    Held held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.id == id; });
      ASSERT_NE(it, held_.end()) << id << " is not held";
      held = std::move(*it);
      held_.erase(it);
    }
    held.done(status);  // outside the lock: the reactor may run Add (the next message) inline
  }
  void AnswerAll() {
    for (const std::string& id : HeldIds()) Answer(id);
  }
  // The ids held now, sorted.
  std::vector<std::string> HeldIds() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> ids;
    for (const Held& h : held_) ids.push_back(h.id);
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  size_t most() {
    std::lock_guard<std::mutex> lock(mu_);
    return most_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Held> held_;
  size_t most_ = 0;
  bool auto_answer_ = false;
};

// The outcomes the reactor counts itself (InferenceServer::CountRequest); nothing else is used.
class CountingCore final : public InferenceServer {
 public:
  void Infer(InferenceRequest, InferDone) override { ADD_FAILURE() << "the policy runs its own"; }
  void CountRequest(const std::optional<std::string>&, const Status& status, Clock::time_point,
                    Protocol) override {
    std::lock_guard<std::mutex> lock(mu_);
    counted_.push_back(status.code());
  }
  std::shared_ptr<const ModelRepository> repository() const override { return nullptr; }
  std::vector<StatusCode> counted() {
    std::lock_guard<std::mutex> lock(mu_);
    return counted_;
  }

 private:
  std::mutex mu_;
  std::vector<StatusCode> counted_;
};

struct TestDecoded {
  std::string id;
  bool count_outcome = true;  // the reactor sets it false when it counts outcomes itself
};
struct TestResult {
  Status status;  // not OK: the answer fails to encode
};

template <bool kEndOnError>
struct TestPolicy {
  using Request = v1::LayerStepRequest;
  using Response = v1::LayerStepResponse;
  using Decoded = TestDecoded;
  using Result = TestResult;
  struct Pending {
    std::string id;
  };
  static constexpr char kMethod[] = "TestStream";
  static constexpr Protocol kProtocol = Protocol::kNative;
  static constexpr bool kErrorsEndStream = kEndOnError;

  InferenceServer* core() const { return counting; }
  int window() const { return stream_window; }
  static const std::string& ModelOf(const Request& request) { return request.model(); }
  StatusOr<TestDecoded> Decode(const Request& request, grpc::ServerContextBase*, const RequestLog&,
                               Pending* pending) const {
    if (request.layer() < 0) {
      return InvalidArgument("layer: " + std::to_string(request.layer()) + " is negative");
    }
    pending->id = request.id();
    return TestDecoded{request.id()};
  }
  static bool InOrder(const TestDecoded&) { return false; }
  void Run(TestDecoded decoded, std::function<void(TestResult)> done) const {
    runner->Add({decoded.id, [done](Status s) { done(TestResult{s}); }});
  }
  static Status Encode(const Request& request, const Pending& pending, const TestResult& result,
                       Response* out) {
    if (!result.status.ok()) return result.status;
    out->set_id(pending.id);
    out->set_layer(request.layer());
    return Status::Ok();
  }
  static std::unique_ptr<Response> ErrorAnswer(const Request& request, const Status& status) {
    auto out = std::make_unique<Response>();
    out->set_id(request.id());
    out->mutable_error()->set_code(static_cast<int>(status.code()));
    out->mutable_error()->set_message(status.message());
    return out;
  }

  Runner* runner;
  CountingCore* counting;
  int stream_window;
  std::shared_ptr<int> life;  // the reactor's: gone once the reactor is deleted
};

template <bool kEndOnError>
class TestService final : public v1::AttentionService::CallbackService {
 public:
  TestService(Runner* runner, CountingCore* core, int window)
      : runner_(runner), core_(core), window_(window) {}
  grpc::ServerBidiReactor<v1::LayerStepRequest, v1::LayerStepResponse>* LayerSteps(
      grpc::CallbackServerContext* context) override {
    return new OrderedStreamReactor<TestPolicy<kEndOnError>>(MakePolicy(), context);
  }
  // The completion-queue API's reactor of a call that started.
  CqBidiBase* CqLayerSteps(std::unique_ptr<CqStreamCall> call) {
    grpc::ServerContextBase* context = call->context();
    return new OrderedStreamReactor<TestPolicy<kEndOnError>,
                                    CqBidiReactor<v1::LayerStepRequest, v1::LayerStepResponse>>(
        MakePolicy(), context, std::move(call));
  }
  // Whether the last reactor made is still alive.
  bool ReactorAlive() {
    std::lock_guard<std::mutex> lock(mu_);
    return !last_life_.expired();
  }

 private:
  TestPolicy<kEndOnError> MakePolicy() {
    auto life = std::make_shared<int>(0);
    std::lock_guard<std::mutex> lock(mu_);
    last_life_ = life;
    return {runner_, core_, window_, life};
  }

  std::mutex mu_;
  std::weak_ptr<int> last_life_;
  Runner* runner_;
  CountingCore* core_;
  int window_;
};

using RawService = v1::AttentionService::WithRawMethod_LayerSteps<v1::AttentionService::Service>;

// A server of one TestService on 127.0.0.1:0 (on the completion-queue API when `cq`) and a stream
// to it.
template <bool kEndOnError>
class Harness {
 public:
  Harness(int window, bool cq) : service(&runner, &core, window) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    if (cq) {
      queue = std::make_unique<CqQueue>(CqQueue::Options{});
      queue->AddTo(&builder);
      method = ServeRawStream(queue.get(), &raw_service, &RawService::RequestLayerSteps,
                              [this](std::unique_ptr<CqStreamCall> call) {
                                return service.CqLayerSteps(std::move(call));
                              });
      builder.RegisterService(&raw_service);
    } else {
      builder.RegisterService(&service);
    }
    server = builder.BuildAndStart();
    if (queue) queue->Start();
    EXPECT_GT(port, 0);
    stub = v1::AttentionService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                             grpc::InsecureChannelCredentials()));
    context.set_deadline(std::chrono::system_clock::now() + testing::kWaitTimeout);
    stream = stub->LayerSteps(&context);
  }
  ~Harness() {
    runner.AutoAnswer();
    runner.AnswerAll();                                  // nothing left waiting on the test
    server->Shutdown(std::chrono::system_clock::now());  // cancels what is still open
    if (queue) queue->Shutdown();                        // after the server's, as in the app
  }
  // Writes messages with these ids (a negative layer does not decode), then half-closes. (A
  // write may fail once the server has ended the stream: what was answered is what counts.)
  void WriteAll(const std::vector<std::pair<std::string, int64_t>>& messages) {
    for (const auto& [id, layer] : messages) {
      v1::LayerStepRequest r;
      r.set_id(id);
      r.set_layer(layer);
      r.set_model("m");
      if (!stream->Write(r)) return;
    }
    stream->WritesDone();
  }
  std::vector<v1::LayerStepResponse> ReadAll() {
    std::vector<v1::LayerStepResponse> answers;
    v1::LayerStepResponse r;
    while (stream->Read(&r)) answers.push_back(r);
    return answers;
  }

  // In this order: the stream goes first, the server before what its reactors use.
  Runner runner;
  CountingCore core;
  TestService<kEndOnError> service;
  RawService raw_service;
  std::unique_ptr<CqQueue> queue;
  std::unique_ptr<CqStreamMethod> method;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::AttentionService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::LayerStepRequest, v1::LayerStepResponse>> stream;
};

class OrderedStreamReactorTest : public ::testing::TestWithParam<bool> {};  // true: CQ API

std::vector<std::string> Ids(const std::vector<v1::LayerStepResponse>& answers) {
  std::vector<std::string> ids;
  for (const auto& a : answers) ids.push_back(a.id());
  return ids;
}

TEST_P(OrderedStreamReactorTest, AnswersAreWrittenInMessageOrderWhateverOrderTheWorkEnds) {
  Harness<true> h(/*window=*/4, GetParam());
  h.WriteAll({{"m0", 0}, {"m1", 1}, {"m2", 2}, {"m3", 3}});
  ASSERT_TRUE(h.runner.WaitHeld(4));
  for (const char* id : {"m3", "m2", "m1", "m0"}) h.runner.Answer(id);  // m0 last
  const auto answers = h.ReadAll();
  const grpc::Status status = h.stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Ids(answers), (std::vector<std::string>{"m0", "m1", "m2", "m3"}));
  for (size_t i = 0; i < answers.size(); ++i) EXPECT_EQ(answers[i].layer(), int64_t(i));
  // kErrorsEndStream: the reactor counts each answer it wrote, OK.
  EXPECT_EQ(h.core.counted(), std::vector<StatusCode>(4, StatusCode::kOk));
}

TEST_P(OrderedStreamReactorTest, AtMostWindowMessagesAreInTheWorkAtOnce) {
  Harness<true> h(/*window=*/2, GetParam());
  h.WriteAll({{"m0", 0}, {"m1", 0}, {"m2", 0}, {"m3", 0}, {"m4", 0}});
  // Each answer frees one place: the next message comes in only then.
  ASSERT_TRUE(h.runner.WaitHeld(2));
  EXPECT_EQ(h.runner.HeldIds(), (std::vector<std::string>{"m0", "m1"}));
  h.runner.Answer("m0");
  ASSERT_TRUE(h.runner.WaitHeld(2));
  EXPECT_EQ(h.runner.HeldIds(), (std::vector<std::string>{"m1", "m2"}));
  h.runner.Answer("m1");
  ASSERT_TRUE(h.runner.WaitHeld(2));
  EXPECT_EQ(h.runner.HeldIds(), (std::vector<std::string>{"m2", "m3"}));
  h.runner.Answer("m2");
  ASSERT_TRUE(h.runner.WaitHeld(2));
  h.runner.Answer("m3");
  ASSERT_TRUE(h.runner.WaitHeld(1));
  h.runner.Answer("m4");
  EXPECT_EQ(Ids(h.ReadAll()), (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4"}));
  EXPECT_TRUE(h.stream->Finish().ok());
  EXPECT_EQ(h.runner.most(), 2u) << "more messages than the window were in the work at once";
}

TEST_P(OrderedStreamReactorTest, AFailingMessageEndsTheStreamAfterTheAnswersBeforeIt) {
  Harness<true> h(/*window=*/4, GetParam());
  h.runner.AutoAnswer();
  h.WriteAll({{"m0", 0}, {"m1", 0}, {"bad", -3}, {"m3", 0}});
  const auto answers = h.ReadAll();
  const grpc::Status status = h.stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "message 2: layer: -3 is negative");
  EXPECT_EQ(Ids(answers), (std::vector<std::string>{"m0", "m1"})) << "m3 was answered";
  // Two answers written, then the failure that ended the stream: counted once each.
  EXPECT_EQ(h.core.counted(), (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kOk,
                                                       StatusCode::kInvalidArgument}));
}

TEST_P(OrderedStreamReactorTest, AnAnswerThatFailsToEncodeEndsTheStreamWithItsCode) {
  Harness<true> h(/*window=*/4, GetParam());
  h.WriteAll({{"m0", 0}, {"m1", 0}, {"m2", 0}});
  ASSERT_TRUE(h.runner.WaitHeld(3));
  h.runner.Answer("m1", Internal("too big to encode"));
  h.runner.Answer("m2");
  h.runner.Answer("m0");
  const auto answers = h.ReadAll();
  const grpc::Status status = h.stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(status.error_message(), "message 1: too big to encode");
  EXPECT_EQ(Ids(answers), (std::vector<std::string>{"m0"}));
}

TEST_P(OrderedStreamReactorTest, WithoutEndingTheStreamAFailureIsAnsweredInItsPlace) {
  Harness<false> h(/*window=*/4, GetParam());
  h.runner.AutoAnswer();
  h.WriteAll({{"m0", 0}, {"bad", -1}, {"m2", 0}});
  const auto answers = h.ReadAll();
  const grpc::Status status = h.stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(Ids(answers), (std::vector<std::string>{"m0", "bad", "m2"}));
  EXPECT_FALSE(answers[0].has_error());
  EXPECT_EQ(answers[1].error().code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_EQ(answers[1].error().message(), "layer: -1 is negative");
  EXPECT_FALSE(answers[2].has_error());
  // The work counts what it answers; the reactor counts only the message that never reached it.
  EXPECT_EQ(h.core.counted(), std::vector<StatusCode>{StatusCode::kInvalidArgument});
}

TEST_P(OrderedStreamReactorTest, ACancelledStreamLivesUntilItsWorkHasAnswered) {
  Harness<true> h(/*window=*/4, GetParam());
  h.WriteAll({{"m0", 0}, {"m1", 0}});
  ASSERT_TRUE(h.runner.WaitHeld(2));
  h.context.TryCancel();
  h.ReadAll();
  EXPECT_EQ(h.stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The work still holds both messages, and will call the reactor back: it must stay alive (it
  // finishes, and is deleted in OnDone, only once nothing of it is outstanding).
  EXPECT_TRUE(h.service.ReactorAlive());
  h.runner.Answer("m1");
  h.runner.Answer("m0");
  EXPECT_TRUE(testing::WaitUntil([&] { return !h.service.ReactorAlive(); },
                                 "the cancelled stream's reactor to be deleted"));
}

INSTANTIATE_TEST_SUITE_P(Apis, OrderedStreamReactorTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "CompletionQueue" : "Callback";
                         });

}  // namespace
}  // namespace mha::serve
