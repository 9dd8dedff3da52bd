// CqUnaryMethod (server/frontends/cq/cq_unary.h) on a real in-process gRPC server: every call
// is answered once whether its handler answers inline or later from another thread; a call still
// open when the server shuts down is cancelled and freed; may_block says whether another thread
// waited to take the queue over, and a handler that hands it on (CallerThread) before it blocks
// lets that thread take the next call; nothing leaks (live_calls() is 0 after Shutdown). No
// CPU-speed dependence: the handlers answer when the test says.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "cq_test_server.h"
#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/cq/cq_unary.h"
#include "server/serving/caller_thread.h"
#include "wait.h"

namespace mha::serve {
namespace cq_unary_method_test {

using namespace std::chrono_literals;
using Service = v1::AttentionService::WithRawMethod_Forward<v1::AttentionService::Service>;

// The answer: ForwardResponse.model = the request's model (parsed and serialized here).
void Echo(CqCall* call) {
  v1::ForwardRequest request;
  grpc::ByteBuffer copy = call->request();
  ASSERT_TRUE(grpc::SerializationTraits<v1::ForwardRequest>::Deserialize(&copy, &request).ok());
  v1::ForwardResponse response;
  response.set_model(request.model());
  bool own = false;
  ASSERT_TRUE(
      grpc::SerializationTraits<v1::ForwardResponse>::Serialize(response, call->response(), &own)
          .ok());
  call->Finish(grpc::Status::OK);
}

class CqUnaryMethodTest : public ::testing::Test {
 protected:
  void Start(CqUnaryMethod::Handler handler) {
    method_ = ServeRawUnary(&queue_, &service_, &Service::RequestForward, std::move(handler),
                            CqUnaryMethod::Options{4});
    served_ = std::make_unique<testing::CqTestServer>(
        &queue_, std::initializer_list<grpc::Service*>{&service_});
    ASSERT_TRUE(served_->listening());
    stub_ = v1::AttentionService::NewStub(served_->Channel());
  }
  grpc::Status Call(const std::string& model, v1::ForwardResponse* response,
                    std::chrono::seconds deadline = 60s) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    v1::ForwardRequest request;
    request.set_model(model);
    return stub_->Forward(&context, request, response);
  }
  void TearDown() override {
    if (served_) served_->Stop();
    EXPECT_EQ(method_->live_calls(), 0) << "calls leaked";
  }

  Service service_;
  std::unique_ptr<CqUnaryMethod> method_;
  CqQueue queue_{CqQueue::Options{2}};  // destroyed after the server, before the method
  std::unique_ptr<testing::CqTestServer> served_;
  std::unique_ptr<v1::AttentionService::Stub> stub_;
};

TEST_F(CqUnaryMethodTest, EveryCallIsAnsweredOnceInlineOrLaterFromAnotherThread) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<CqCall*> later;
  bool done = false;
  std::thread answerer([&] {  // answers the calls the handler left open, off the queue's threads
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return done || !later.empty(); });
      if (later.empty()) return;
      CqCall* call = later.front();
      later.pop_front();
      lock.unlock();
      Echo(call);
      lock.lock();
    }
  });
  std::atomic<int> calls{0};
  Start([&](CqCall* call) {
    if (calls.fetch_add(1) % 2 == 0) return Echo(call);
    std::lock_guard<std::mutex> lock(mu);
    later.push_back(call);
    cv.notify_all();
  });
  std::vector<std::future<bool>> clients;
  for (int c = 0; c < 8; ++c) {
    clients.push_back(std::async(std::launch::async, [this, c] {
      for (int i = 0; i < 25; ++i) {
        const std::string model = std::to_string(c) + "/" + std::to_string(i);
        v1::ForwardResponse response;
        if (!Call(model, &response).ok() || response.model() != model) return false;
      }
      return true;
    }));
  }
  for (auto& f : clients) EXPECT_TRUE(testing::GetWithin(f, "a client's 25 calls"));
  EXPECT_EQ(calls.load(), 200);
  served_.reset();  // stopped: no handler runs after this body's locals, which it uses, are gone
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  answerer.join();
}

TEST_F(CqUnaryMethodTest, ACallOpenAtShutdownIsCancelledAndFreed) {
  std::promise<CqCall*> taken;
  Start([&](CqCall* call) { taken.set_value(call); });  // never answered by the handler
  auto client = std::async(std::launch::async, [this] {
    v1::ForwardResponse response;
    return Call("held", &response).error_code();
  });
  auto held = taken.get_future();
  CqCall* call = testing::GetWithin(held, "the call reaching the handler");
  served_->server()->Shutdown(std::chrono::system_clock::now() + 100ms);  // grace out: cancelled
  const grpc::StatusCode code = testing::GetWithin(client, "the client's answer");
  EXPECT_TRUE(code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::UNAVAILABLE)
      << "code " << code;
  call->Finish(grpc::Status::OK);  // too late: its tag comes back failed, the call is freed
  served_.reset();
}

TEST_F(CqUnaryMethodTest, MayBlockSaysWhetherAnotherThreadWasFreeToTakeCalls) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mu;
  std::vector<bool> may_block;
  Start([&](CqCall* call) {
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = may_block.empty();
      may_block.push_back(call->may_block());
    }
    if (first) {  // the first call holds its thread, after handing the queue on
      CqQueue::Caller().BeforeBlocking();
      released.wait();
    }
    Echo(call);
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return queue_.idle_threads() == 2; }, "both threads idle"));
  auto first = std::async(std::launch::async, [this] {
    v1::ForwardResponse response;
    return Call("first", &response).ok();
  });
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return may_block.size() == 1;
      },
      "the first call held"));
  v1::ForwardResponse response;
  EXPECT_TRUE(Call("second", &response).ok());  // the other thread takes it: none is left free
  release.set_value();
  EXPECT_TRUE(testing::GetWithin(first, "the first call's answer"));
  served_.reset();  // stopped: no handler runs after this body's locals, which it uses, are gone
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(may_block, (std::vector<bool>{true, false}));
}

}  // namespace cq_unary_method_test
}  // namespace mha::serve
