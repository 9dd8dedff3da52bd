#include "server/frontends/cq/cq_stream.h"

#include <grpc/support/time.h>

#include <utility>

namespace mha::serve {

CqStreamCall::CqStreamCall(CqStreamMethod* method)
    : method_(method),
      stream_(&context_),
      start_(this, Event::kStart),
      read_tag_(this, Event::kRead),
      write_tag_(this, Event::kWrite),
      finish_tag_(this, Event::kFinish),
      done_tag_(this, Event::kDone),
      alarm_tag_(this, Event::kAlarm) {}

void CqStreamCall::OnEvent(Event event, bool ok) {
  if (event == Event::kStart) {
    if (!ok) {  // the queue shuts down: no call came, and no done event will (grpc/grpc#10136)
      delete this;
      return;
    }
    CqStreamMethod* const method = method_;
    method->RequestOne();  // the next call, before this one is handled
    CqBidiBase* reactor = method->factory_(std::unique_ptr<CqStreamCall>(this));
    bool done_early = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_ = true;
      done_early = done_early_;
    }
    // The reactor cannot be gone yet: OnDone needs the done event, which only now reaches it.
    if (done_early) reactor->OnEvent(Event::kDone, true);
    return;
  }
  if (event == Event::kDone) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      done_early_ = true;
      return;
    }
  }
  reactor_->OnEvent(event, ok);
}

CqBidiBase::CqBidiBase(std::unique_ptr<CqStreamCall> call) : call_(std::move(call)) {
  call_->reactor_ = this;  // before any operation of the reactor's: their events come here
}

CqBidiBase::~CqBidiBase() = default;

// Each operation starts only while the queue accepts (CqQueue::StartWhileAccepting). At shutdown
// a read or write that did not start leaves the reactor waiting for it: it ends with the process.
void CqBidiBase::ReadRaw() {
  std::lock_guard<std::mutex> lock(mu_);  // its event is handled under it too: no race on reading_
  reading_ = Queue()->StartWhileAccepting(
      [&] { call_->stream_.Read(&call_->read_, CqQueue::HandOver(&call_->read_tag_)); });
}

CqQueue* CqBidiBase::Queue() const { return call_->method_->queue_; }

void CqBidiBase::WriteRaw(const grpc::Status& serialized) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = Queue()->StartWhileAccepting([&] {
    if (serialized.ok()) {
      call_->stream_.Write(call_->write_, CqQueue::HandOver(&call_->write_tag_));
    } else {  // the write fails, as the callback API's does: through the queue, not inline
      call_->alarm_.Set(Queue()->get(), gpr_now(GPR_CLOCK_MONOTONIC),
                        CqQueue::HandOver(&call_->alarm_tag_));
    }
  });
}

void CqBidiBase::FinishRaw(const grpc::Status& status) {
  const bool started = Queue()->StartWhileAccepting(
      [&] { call_->stream_.Finish(status, CqQueue::HandOver(&call_->finish_tag_)); });
  if (started) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finish_back_ = true;  // as if it came back: the queue shuts down
  }
  MaybeDone();  // the caller's last statement, as Finish is
}

void CqBidiBase::MaybeDone() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_called_ || !finish_back_ || !done_back_ || reading_ || writing_ || reacting_ > 0) {
      return;
    }
    done_called_ = true;
  }
  OnDone();  // last: the reactor may delete itself
}

void CqBidiBase::OnEvent(CqStreamCall::Event event, bool ok) {
  using Event = CqStreamCall::Event;
  switch (event) {
    case Event::kRead: {
      std::unique_lock<std::mutex> lock(mu_);
      reading_ = false;
      ++reacting_;  // counted before reading_ drops, as one step
      lock.unlock();
      OnRawReadDone(ok, call_->read_);
      lock.lock();
      --reacting_;
      lock.unlock();
      return MaybeDone();
    }
    case Event::kWrite:
    case Event::kAlarm: {
      std::unique_lock<std::mutex> lock(mu_);
      writing_ = false;
      ++reacting_;
      lock.unlock();
      OnWriteDone(event == Event::kWrite && ok);
      lock.lock();
      --reacting_;
      lock.unlock();
      return MaybeDone();
    }
    case Event::kFinish: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        finish_back_ = true;
      }
      return MaybeDone();
    }
    case Event::kDone: {
      const bool cancelled = call_->context_.IsCancelled();
      std::unique_lock<std::mutex> lock(mu_);
      done_back_ = true;
      if (!cancelled) {
        lock.unlock();
        return MaybeDone();
      }
      ++reacting_;  // with done_back_, as one step: OnDone cannot come before OnCancel
      lock.unlock();
      OnCancel();
      lock.lock();
      --reacting_;
      lock.unlock();
      return MaybeDone();
    }
    case Event::kStart:
      return;  // handled by the call
  }
}

CqStreamMethod::CqStreamMethod(CqQueue* queue, RequestFn request, Factory factory, Options options)
    : queue_(queue), request_(std::move(request)), factory_(std::move(factory)), options_(options) {
  queue_->OnStartRequest(options_.slots, [this] { RequestOne(); });
}

void CqStreamMethod::RequestOne() {
  auto* call = new CqStreamCall(this);
  const bool requested = queue_->RequestCall(&call->context_, &call->done_tag_, [&] {
    request_(&call->context_, &call->stream_, queue_->get(), CqQueue::HandOver(&call->start_));
  });
  if (!requested) delete call;  // the queue shuts down: no call will come
}

}  // namespace mha::serve
