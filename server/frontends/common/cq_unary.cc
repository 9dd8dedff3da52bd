#include "server/frontends/common/cq_unary.h"

#include <algorithm>
#include <utility>

#include "server/serving/scheduling/caller_thread.h"

// ThreadSanitizer does not see gRPC's completion queue (Debian's libgrpc is not instrumented): a
// tag handed to gRPC on one thread comes back from Next on another. These annotate that handoff
// as the release and acquire it is.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define MHA_CQ_HANDOFF(tag) __tsan_release(tag)
#define MHA_CQ_TAKEN(tag) __tsan_acquire(tag)
#else
#define MHA_CQ_HANDOFF(tag) (void)(tag)
#define MHA_CQ_TAKEN(tag) (void)(tag)
#endif

namespace mha::serve {

CqCall::CqCall(CqUnaryMethod* method)
    : method_(method),
      responder_(&context_),
      main_tag_{this, Event::kMain},
      done_tag_{this, Event::kDone} {
  method_->live_.fetch_add(1);
}

CqCall::~CqCall() { method_->live_.fetch_sub(1); }

// Not instrumented by ThreadSanitizer, so that ServerAsyncResponseWriter::Finish stays a frame of
// its own there: its header code fills the call's op set and context, which the queue's thread
// then reads and frees; libgrpc orders the two (the batch starts before its event can come back)
// out of TSan's sight, and tests/sanitize/tsan.supp names that gRPC class as it names the others.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((no_sanitize_thread))
#endif
void CqCall::Finish(const grpc::Status& status) {
  // What this thread wrote into response() happens before the thread that takes the finish
  // event reads or frees it (OnEvent's acquire), in C++'s terms and not only through gRPC's queue.
  finishing_.store(true, std::memory_order_release);
  MHA_CQ_HANDOFF(&main_tag_);
  if (status.ok()) {
    responder_.Finish(response_, status, &main_tag_);
  } else {
    responder_.FinishWithError(status, &main_tag_);
  }
}

void CqCall::OnEvent(Event event, bool ok) {
  if (event == Event::kMain && !started_.load(std::memory_order_acquire)) {
    if (!ok) {  // the queue shuts down: no call came, and no done tag will (gRPC issue 10136)
      delete this;
      return;
    }
    started_.store(true, std::memory_order_release);  // seen by the thread of the next event
    CqUnaryMethod* const method = method_;            // `this` may be gone once the handler returns
    method->RequestOne();                             // the next call, before this one is handled
    // Free to block while another thread waits for the lead: only this (the leading) thread
    // hands the lead on, so the waiting ones can only grow in number until it does.
    may_block_ = method->followers_.load(std::memory_order_acquire) > 0;
    method->handler_(this);
    return;
  }
  if (event == Event::kMain) (void)finishing_.load(std::memory_order_acquire);  // see Finish
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
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

void CqUnaryMethod::RequestOne() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return;
  auto* call = new CqCall(this);
  call->context_.AsyncNotifyWhenDone(&call->done_tag_);
  MHA_CQ_HANDOFF(&call->main_tag_);
  MHA_CQ_HANDOFF(&call->done_tag_);
  request_(&call->context_, &call->request_, &call->responder_, cq_.get(), &call->main_tag_);
}

// The lead as the thread that holds it sees it: `held` turns false when a handler hands it on.
struct CqUnaryMethod::Lead {
  CqUnaryMethod* method;
  bool held = true;
};

void CqUnaryMethod::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(lead_mu_);
      followers_.fetch_add(1, std::memory_order_release);
      idle_.fetch_add(1, std::memory_order_relaxed);
      lead_cv_.wait(lock, [this] { return !led_ || drained_; });
      idle_.fetch_sub(1, std::memory_order_relaxed);
      followers_.fetch_sub(1, std::memory_order_release);
      if (drained_) return;
      led_ = true;
    }
    if (!RunLead()) return;
  }
}

bool CqUnaryMethod::RunLead() {
  Lead lead{this};
  void* tag = nullptr;
  bool ok = false;
  while (lead.held) {
    idle_.fetch_add(1, std::memory_order_relaxed);
    const bool got = cq_->Next(&tag, &ok);
    idle_.fetch_sub(1, std::memory_order_relaxed);
    if (!got) {  // shut down and drained: the followers end too
      {
        std::lock_guard<std::mutex> lock(lead_mu_);
        drained_ = true;
        led_ = false;
      }
      lead_cv_.notify_all();
      return false;
    }
    MHA_CQ_TAKEN(tag);
    const CallerThread::Scope scope(&CqUnaryMethod::HandOff, &lead);
    auto* t = static_cast<CqCall::Tag*>(tag);
    t->call->OnEvent(t->event, ok);
  }
  return true;
}

void CqUnaryMethod::HandOff(void* arg) {
  auto* lead = static_cast<Lead*>(arg);
  CqUnaryMethod* const method = lead->method;
  {
    std::lock_guard<std::mutex> lock(method->lead_mu_);
    method->led_ = false;
  }
  lead->held = false;
  method->lead_cv_.notify_one();
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
  for (auto& t : threads_) t.join();  // the leader drains the queue; then they all end
  threads_.clear();
}

}  // namespace mha::serve
