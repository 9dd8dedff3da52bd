// grpc.health.v1.Health on the completion-queue API (the app's CqQueue): Check and Watch, answered
// as gRPC's default health service answers them. mha-server does not use that one: it is served on
// the callback API, whose threads wait on the process's one epoll set beside the queue's leader
// and take its calls' events from it (a hand-off per call, docs/performance.md).
//
// Services known: "" (the whole server) and every name given to SetServingStatus. Check answers
// SERVING or NOT_SERVING, NOT_FOUND for a name it does not know; Watch sends the status at once
// (SERVICE_UNKNOWN for such a name) and again at every change, only the latest when a write is
// still out. Shutdown() ends every watch OK and answers any later one NOT_SERVING, then ends it.
//
// Lifecycle: constructed before the queue's Start(); Shutdown() before the server's Shutdown (an
// open watch would hold it until its grace deadline); the service outlives the queue's Shutdown.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/frontends/common/grpc_call.h"

namespace mha::serve {

namespace internal {
using HealthBase = grpc::health::v1::Health::WithRawMethod_Check<
    grpc::health::v1::Health::WithRawMethod_Watch<grpc::health::v1::Health::Service>>;
}  // namespace internal

class HealthService final : public internal::HealthBase {
 public:
  explicit HealthService(CqQueue* queue);
  ~HealthService() override;

  void SetServingStatus(const std::string& service, bool serving);
  void SetServingStatus(bool serving);  // every service known
  void Shutdown();

  void HandleCheck(const UnaryCall& call, const grpc::health::v1::HealthCheckRequest* request,
                   grpc::health::v1::HealthCheckResponse* response);

 private:
  class Watch;
  friend class Watch;
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;
  ServingStatus StatusLocked(const std::string& service) const;

  CqQueue* const queue_;
  std::unique_ptr<CqUnaryMethod> check_;
  std::mutex mu_;
  std::map<std::string, bool> serving_;  // "" always present
  bool shut_down_ = false;
  std::set<Watch*> watches_;  // started and not done
};

}  // namespace mha::serve
