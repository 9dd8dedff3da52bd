#include "server/frontends/common/cq_unary.h"

#include <algorithm>
#include <utility>

namespace mha::serve {

CqCall::CqCall(CqUnaryMethod* method)
    : method_(method),
      responder_(&context_),
      main_tag_{this, Event::kMain},
      done_tag_{this, Event::kDone} {
  method_->live_.fetch_add(1);
}

CqCall::~CqCall() { method_->live_.fetch_sub(1); }

void CqCall::Finish(const grpc::Status& status) {
  if (status.ok()) {
    responder_.Finish(response_, status, &main_tag_);
  } else {
    responder_.FinishWithError(status, &main_tag_);
  }
}

void CqCall::OnEvent(Event event, bool ok) {
  if (event == Event::kMain && !started_) {
    if (!ok) {  // the queue shuts down: no call came, and no done tag will (gRPC issue 10136)
      delete this;
      return;
    }
    started_ = true;
    CqUnaryMethod* const method = method_;  // `this` may be gone once the handler returns
    method->RequestOne();                   // the next call, before this one is handled
    // Free to block while another thread is outside a handler: that one only passes events on
    // (finishes, done tags) and is soon back for the next call.
    const int handling = method->handling_.fetch_add(1, std::memory_order_acq_rel) + 1;
    may_block_ = handling < method->thread_count_;
    method->handler_(this);
    method->handling_.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  Release();  // the finish went out (or failed), or the call is done
}

void CqCall::Release() {
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

CqUnaryMethod::CqUnaryMethod(RequestFn request, Handler handler, Options options)
    : request_(std::move(request)), handler_(std::move(handler)), options_(options) {}

CqUnaryMethod::~CqUnaryMethod() { Shutdown(); }

void CqUnaryMethod::AddTo(grpc::ServerBuilder* builder) { cq_ = builder->AddCompletionQueue(); }

void CqUnaryMethod::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = true;
  }
  for (int i = 0; i < std::max(1, options_.slots); ++i) RequestOne();
  const int threads = std::max(2, options_.threads);
  thread_count_ = threads;
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

void CqUnaryMethod::RequestOne() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return;
  auto* call = new CqCall(this);
  call->context_.AsyncNotifyWhenDone(&call->done_tag_);
  request_(&call->context_, &call->request_, &call->responder_, cq_.get(), &call->main_tag_);
}

void CqUnaryMethod::Loop() {
  void* tag = nullptr;
  bool ok = false;
  for (;;) {
    idle_.fetch_add(1, std::memory_order_relaxed);
    const bool got = cq_->Next(&tag, &ok);
    idle_.fetch_sub(1, std::memory_order_relaxed);
    if (!got) return;  // shut down and drained
    auto* t = static_cast<CqCall::Tag*>(tag);
    t->call->OnEvent(t->event, ok);
  }
}

void CqUnaryMethod::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cq_ || shut_down_) return;
    shut_down_ = true;
    accepting_ = false;
    cq_->Shutdown();
  }
  if (threads_.empty()) {  // never started: drain here (nothing was requested)
    Loop();
    return;
  }
  for (auto& t : threads_) t.join();  // each drains until Next says the queue is empty
  threads_.clear();
}

}  // namespace mha::serve
