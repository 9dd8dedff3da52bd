// HealthService (server/frontends/health/health_service.h) on a real in-process gRPC server, its
// only service, on a CqQueue, with grpc.health.v1's generated client: Check for the whole server,
// a named service and an unknown one; Watch's first answer, an update at every change, and its
// end at Shutdown (before the server's, so that the server's Shutdown does not wait for it).
#include "server/frontends/health/health_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "cq_test_server.h"
#include "wait.h"

namespace mha::serve {
namespace health_service_test {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    health_.SetServingStatus("mha.v1.AttentionService", false);
    ASSERT_TRUE(served_.listening());
    stub_ = Health::NewStub(served_.Channel());
  }
  void TearDown() override {
    health_.Shutdown();  // before the server's, as in the app
    served_.Stop();
  }
  grpc::Status Check(const std::string& service, HealthCheckResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + testing::kWaitTimeout);
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, out);
  }
  // A Watch of one service: Next() reads its next answer's status (kEnded once the stream ended).
  struct Watching {
    static constexpr int kEnded = -1;
    int Next() {
      HealthCheckResponse r;
      return reader->Read(&r) ? r.status() : kEnded;
    }
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
  };
  std::unique_ptr<Watching> Watch(const std::string& service) {
    auto w = std::make_unique<Watching>();
    w->context.set_deadline(std::chrono::system_clock::now() + testing::kWaitTimeout);
    HealthCheckRequest request;
    request.set_service(service);
    w->reader = stub_->Watch(&w->context, request);
    return w;
  }

  CqQueue queue_{CqQueue::Options{}};
  HealthService health_{&queue_};
  testing::CqTestServer served_{&queue_, {&health_}};
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckAnswersEachKnownServiceAndNotFoundForOthers) {
  HealthCheckResponse r;
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  health_.SetServingStatus(true);
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(Check("mha.v1.AttentionService", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  health_.SetServingStatus("mha.v1.AttentionService", false);
  ASSERT_TRUE(Check("mha.v1.AttentionService", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  const grpc::Status unknown = Check("no.such.Service", &r);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.error_message().find("no.such.Service"), std::string::npos);
}

TEST_F(HealthServiceTest, WatchSendsTheStatusThenEveryChangeAndEndsAtShutdown) {
  auto w = Watch("mha.v1.AttentionService");
  ASSERT_EQ(w->Next(), HealthCheckResponse::NOT_SERVING);
  health_.SetServingStatus(true);
  ASSERT_EQ(w->Next(), HealthCheckResponse::SERVING);
  health_.Shutdown();  // NOT_SERVING, then the stream ends OK
  ASSERT_EQ(w->Next(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(w->Next(), Watching::kEnded);
  EXPECT_TRUE(w->reader->Finish().ok());
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceSaysSoAndStaysOpen) {
  auto w = Watch("later.Service");
  ASSERT_EQ(w->Next(), HealthCheckResponse::SERVICE_UNKNOWN);
  health_.SetServingStatus("later.Service", true);  // known from now on
  ASSERT_EQ(w->Next(), HealthCheckResponse::SERVING);
  w->context.TryCancel();  // the client goes: the server lets go of the watch
  while (w->Next() != Watching::kEnded) {
  }
  EXPECT_EQ(w->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace health_service_test
}  // namespace mha::serve
