#include "server/frontends/cq/cq_unary.h"

#include <utility>

namespace mha::serve {

CqCall::CqCall(CqUnaryMethod* method)
    : method_(method),
      responder_(&context_),
      main_tag_(this, Event::kMain),
      done_tag_(this, Event::kDone) {
  method_->live_.fetch_add(1);
}

CqCall::~CqCall() { method_->live_.fetch_sub(1); }

void CqCall::Finish(const grpc::Status& status) {
  // What this thread wrote into response() happens before the thread that takes the finish
  // event reads or frees it (OnEvent's acquire), in C++'s terms and not only through gRPC's queue.
  finishing_.store(true, std::memory_order_release);
  if (!method_->queue_->StartWhileAccepting([&] { StartFinish(status); })) {
    Release();  // the queue shuts down: no finish event will come
  }
}

// Not instrumented by ThreadSanitizer, and never inlined, so that ServerAsyncResponseWriter::Finish
// stays a frame of its own there: its header code fills the call's op set and context, which the
// queue's thread then reads and frees; libgrpc orders the two (the batch starts before its event
// can come back) out of TSan's sight, and tests/sanitize/tsan.supp names that gRPC class as it
// names the others.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((no_sanitize_thread, noinline))
#endif
void CqCall::StartFinish(const grpc::Status& status) {
  if (status.ok()) {
    responder_.Finish(response_, status, CqQueue::HandOver(&main_tag_));
  } else {
    responder_.FinishWithError(status, CqQueue::HandOver(&main_tag_));
  }
}

void CqCall::OnEvent(Event event, bool ok) {
  if (event == Event::kMain && !started_.load(std::memory_order_acquire)) {
    if (!ok) {  // the queue shuts down: no call came, and no done tag will (grpc/grpc#10136)
      delete this;
      return;
    }
    started_.store(true, std::memory_order_release);  // seen by the thread of the next event
    CqUnaryMethod* const method = method_;            // `this` may be gone once the handler returns
    method->RequestOne();                             // the next call, before this one is handled
    // Free to block while another thread waits for the lead: only this (the leading) thread
    // hands the lead on, so the waiting ones can only grow in number until it does.
    may_block_ = method->queue_->follower_waiting();
    method->handler_(this);
    return;
  }
  if (event == Event::kMain) (void)finishing_.load(std::memory_order_acquire);  // see Finish
  Release();  // the finish went out (or failed), or the call is done
}

void CqCall::Release() {
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

CqUnaryMethod::CqUnaryMethod(CqQueue* queue, RequestFn request, Handler handler, Options options)
    : queue_(queue), request_(std::move(request)), handler_(std::move(handler)), options_(options) {
  queue_->OnStartRequest(options_.slots, [this] { RequestOne(); });
}

void CqUnaryMethod::RequestOne() {
  auto* call = new CqCall(this);
  const bool requested = queue_->RequestCall(&call->context_, &call->done_tag_, [&] {
    request_(&call->context_, &call->request_, &call->responder_, queue_->get(),
             CqQueue::HandOver(&call->main_tag_));
  });
  if (!requested) delete call;  // the queue shuts down: no call will come
}

}  // namespace mha::serve
