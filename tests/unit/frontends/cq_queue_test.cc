// CqQueue (server/frontends/cq/cq_queue.h) on a real in-process gRPC server with two raw
// methods (CqUnaryMethod) on one queue: both are served by its threads; one thread leads at a time
// and a handler that hands the lead on before it blocks (CallerThread) lets another thread take
// the next call, of either method; nothing is requested after Shutdown, and a queue never started
// drains there. (Tags posted with grpc::Alarm would go through gRPC's timer threads, whose
// internal races ThreadSanitizer reports; calls are what the queue carries anyway.)
#include "server/frontends/cq/cq_queue.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "cq_test_server.h"
#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/cq/cq_unary.h"
#include "server/serving/caller_thread.h"
#include "wait.h"

namespace mha::serve {
namespace cq_queue_test {

using namespace std::chrono_literals;
using Service = v1::AttentionService::WithRawMethod_GetModel<
    v1::AttentionService::WithRawMethod_Forward<v1::AttentionService::Service>>;

// Answers a call with `message` serialized.
template <class Message>
void Answer(CqCall* call, const Message& message) {
  bool own = false;
  ASSERT_TRUE(grpc::SerializationTraits<Message>::Serialize(message, call->response(), &own).ok());
  call->Finish(grpc::Status::OK);
}

class CqQueueTest : public ::testing::Test {
 protected:
  // Forward runs `forward`; GetModel answers ModelInfo.name = "model".
  void Start(CqUnaryMethod::Handler forward) {
    forward_ = ServeRawUnary(&queue_, &service_, &Service::RequestForward, std::move(forward),
                             CqUnaryMethod::Options{4});
    get_model_ = ServeRawUnary(
        &queue_, &service_, &Service::RequestGetModel,
        [](CqCall* call) {
          v1::ModelInfo info;
          info.set_name("model");
          Answer(call, info);
        },
        CqUnaryMethod::Options{4});
    served_ = std::make_unique<testing::CqTestServer>(
        &queue_, std::initializer_list<grpc::Service*>{&service_});
    ASSERT_TRUE(served_->listening());
    stub_ = v1::AttentionService::NewStub(served_->Channel());
  }
  void TearDown() override {
    if (served_) served_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 5s);
    queue_.Shutdown();
    if (forward_) {
      EXPECT_EQ(forward_->live_calls(), 0);
    }
    if (get_model_) {
      EXPECT_EQ(get_model_->live_calls(), 0);
    }
  }
  grpc::Status GetModel(std::string* name) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 60s);
    v1::ModelInfo info;
    const grpc::Status status = stub_->GetModel(&context, v1::GetModelRequest(), &info);
    *name = info.name();
    return status;
  }

  Service service_;
  std::unique_ptr<CqUnaryMethod> forward_, get_model_;
  CqQueue queue_{CqQueue::Options{2}};  // destroyed after the server, before the methods
  std::unique_ptr<testing::CqTestServer> served_;
  std::unique_ptr<grpc::Server> server_;  // the tests' own, without ports
  std::unique_ptr<v1::AttentionService::Stub> stub_;
};

TEST_F(CqQueueTest, AHandlerThatHandsTheLeadOnLetsAnotherThreadTakeTheNextCallOfEitherMethod) {
  // Shared with the handler, which may outlive this body when it fails; released however the
  // checks end, so that a failure does not leave a queue thread blocked.
  struct State {
    std::promise<bool> follower_seen;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
  };
  auto state = std::make_shared<State>();
  struct ReleaseOnExit {
    std::shared_ptr<State> state;
    ~ReleaseOnExit() { state->release.set_value(); }
  };
  CqQueue* queue = &queue_;
  Start([state, queue](CqCall* call) {
    state->follower_seen.set_value(queue->follower_waiting());
    CqQueue::Caller().BeforeBlocking();  // the lead goes to the other thread
    state->released.wait();
    Answer(call, v1::ForwardResponse());
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return queue_.idle_threads() == 2; }, "both idle"));
  auto forward = std::async(std::launch::async, [this] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 60s);
    v1::ForwardResponse response;
    return stub_->Forward(&context, v1::ForwardRequest(), &response).ok();
  });
  bool follower = false;
  std::string name;
  grpc::Status status;
  {
    const ReleaseOnExit release_on_exit{state};  // however this block ends
    auto seen = state->follower_seen.get_future();
    follower = testing::GetWithin(seen, "the Forward handler running");
    status = GetModel(&name);  // taken by the other thread meanwhile
  }
  EXPECT_TRUE(follower);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(name, "model");
  EXPECT_TRUE(testing::GetWithin(forward, "the Forward answer"));
}

TEST_F(CqQueueTest, NothingIsRequestedAfterShutdownAndANeverStartedQueueDrains) {
  grpc::ServerBuilder builder;  // a server without ports: only to own the queue
  queue_.AddTo(&builder);
  server_ = builder.BuildAndStart();
  ASSERT_TRUE(server_);
  server_->Shutdown();
  queue_.Shutdown();  // never started: drains on this thread
  bool ran = false;
  EXPECT_FALSE(queue_.RequestWhileAccepting([&] { ran = true; }));
  EXPECT_FALSE(ran);
  EXPECT_EQ(queue_.idle_threads(), 0);
}

// An operation on a call starts only while the queue accepts: one started after its Shutdown()
// began would abort in gRPC (events drained then may react with one: health's Watch finishing,
// a stream cancelled at shutdown).
TEST_F(CqQueueTest, AnOperationStartsOnlyUntilShutdownBegins) {
  grpc::ServerBuilder builder;  // a server without ports: only to own the queue
  queue_.AddTo(&builder);
  server_ = builder.BuildAndStart();
  ASSERT_TRUE(server_);
  queue_.Start();
  int started = 0;
  EXPECT_TRUE(queue_.StartWhileAccepting([&] { ++started; }));
  server_->Shutdown();
  queue_.Shutdown();
  EXPECT_FALSE(queue_.StartWhileAccepting([&] { ++started; }));
  EXPECT_EQ(started, 1);
}

}  // namespace cq_queue_test
}  // namespace mha::serve
