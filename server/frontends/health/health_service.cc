#include "server/frontends/health/health_service.h"

#include <grpcpp/support/async_stream.h>

#include <utility>

namespace mha::serve {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call. Its events (start, write, finish, done) come back on the queue's threads; its
// state is guarded by the service's mutex. It is deleted once every operation it issued came
// back: the done event, the write out, and the finish, which it issues at the service's Shutdown
// or once the call is done (and counts as back when the queue no longer starts operations).
class HealthService::Watch {
 public:
  explicit Watch(HealthService* service)
      : service_(service),
        writer_(&context_),
        start_(this, Event::kStart),
        write_(this, Event::kWrite),
        finish_(this, Event::kFinish),
        done_(this, Event::kDone) {}

  void Request() {  // under no lock: RequestCall takes the queue's
    CqQueue* queue = service_->queue_;
    const bool requested = queue->RequestCall(&context_, &done_, [&] {
      service_->RequestWatch(&context_, &request_, &writer_, queue->get(), queue->get(),
                             CqQueue::HandOver(&start_));
    });
    if (!requested) delete this;
  }

  // The service's status changed: sent now, or once the write out comes back.
  void Send(HealthService::ServingStatus status) {  // under the service's mutex
    if (finish_issued_) return;
    if (writing_) {
      pending_ = status;
      return;
    }
    HealthCheckResponse response;
    response.set_status(status);
    out_.Clear();
    bool own_buffer = false;
    (void)grpc::SerializationTraits<HealthCheckResponse>::Serialize(response, &out_, &own_buffer);
    writing_ = service_->queue_->StartWhileAccepting(
        [&] { writer_.Write(out_, CqQueue::HandOver(&write_)); });
  }
  const std::string& service_name() const { return service_name_; }
  void FinishLocked() {
    if (finish_issued_) return;
    finish_issued_ = true;
    const grpc::Status status =
        bad_request_ ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "request is not a valid grpc.health.v1.HealthCheckRequest")
                     : grpc::Status::OK;
    // Once the queue shuts down nothing starts: the finish counts as back.
    finish_back_ = !service_->queue_->StartWhileAccepting(
        [&] { writer_.Finish(status, CqQueue::HandOver(&finish_)); });
  }

 private:
  enum class Event { kStart, kWrite, kFinish, kDone };
  using Tag = CqQueue::EventTag<Watch, Event>;
  friend Tag;

  void OnEvent(Event event, bool ok) {
    if (event == Event::kStart && !ok) {  // the queue shuts down: no call, no done event
      delete this;
      return;
    }
    if (event == Event::kStart) (new Watch(service_))->Request();  // the next one
    bool gone = false;
    {
      std::lock_guard<std::mutex> lock(service_->mu_);
      switch (event) {
        case Event::kStart:
          Started();
          break;
        case Event::kWrite:
          writing_ = false;
          if (ok && pending_) Send(*std::exchange(pending_, std::nullopt));
          break;
        case Event::kFinish:
          finish_back_ = true;
          break;
        case Event::kDone:
          done_back_ = true;
          service_->watches_.erase(this);
          break;
      }
      if ((done_back_ || service_->shut_down_ || bad_request_) && !writing_) FinishLocked();
      gone = done_back_ && finish_back_ && !writing_;
    }
    if (gone) delete this;
  }

  void Started() {  // under the service's mutex
    HealthCheckRequest request;
    if (!ParseRawMessage(request_, &request)) {
      bad_request_ = true;  // finished INVALID_ARGUMENT below
      return;
    }
    service_name_ = request.service();
    service_->watches_.insert(this);
    Send(service_->StatusLocked(service_name_));
  }

 private:
  HealthService* const service_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_, out_;
  grpc::ServerAsyncWriter<grpc::ByteBuffer> writer_;
  Tag start_, write_, finish_, done_;
  std::string service_name_;
  std::optional<HealthService::ServingStatus> pending_;
  bool writing_ = false, finish_issued_ = false, finish_back_ = false, done_back_ = false;
  bool bad_request_ = false;
};

HealthService::HealthService(CqQueue* queue)
    : queue_(queue),
      check_(ServeTypedUnary(queue, this, &HealthService::RequestCheck, "HealthCheck",
                             &HealthService::HandleCheck)) {
  serving_[""] = false;
  queue_->OnStart([this] { (new Watch(this))->Request(); });
}

HealthService::~HealthService() = default;

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  serving_[service] = serving;
  for (Watch* w : watches_) {
    if (w->service_name() == service) w->Send(StatusLocked(service));
  }
}

void HealthService::SetServingStatus(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, value] : serving_) value = serving;
  for (Watch* w : watches_) w->Send(StatusLocked(w->service_name()));
}

void HealthService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  for (auto& [name, value] : serving_) value = false;
  // Each watch gets NOT_SERVING, then finishes once that write is back (Watch::OnEvent).
  for (Watch* w : watches_) w->Send(StatusLocked(w->service_name()));
}

HealthService::ServingStatus HealthService::StatusLocked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::HandleCheck(const UnaryCall& call, const HealthCheckRequest* request,
                                HealthCheckResponse* response) {
  Unary(call, "HealthCheck", [&] {
    std::lock_guard<std::mutex> lock(mu_);
    const ServingStatus status = StatusLocked(request->service());
    if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
      return NotFound("unknown service '" + request->service() + "'");
    }
    response->set_status(status);
    return Status::Ok();
  });
}

}  // namespace mha::serve
