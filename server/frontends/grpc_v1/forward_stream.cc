#include "server/frontends/grpc_v1/forward_stream.h"

#include <utility>

#include "proto/wire/status_convert.h"

namespace mha::serve {

ForwardStreamReactor::ForwardStreamReactor(AttentionServiceImpl* service,
                                           grpc::CallbackServerContext* context)
    : service_(service), context_(context), log_(StartRequest(context, "ForwardStream")) {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeStartReadLocked();
}

void ForwardStreamReactor::OnReadDone(bool ok) {
  int64_t index = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (!ok || finishing_ || failure_index_ || broken_) {
      read_closed_ = true;
    } else {
      index = next_read_index_++;
      processing_ = true;  // read_buffer_ stays ours: no StartRead until we are done with it
      ++in_flight_;        // and the stream cannot finish under us
    }
  }
  if (index >= 0) {
    RequestLog message_log = log_;
    message_log.start = Clock::now();
    message_log.request_id += "#" + std::to_string(index);
    auto decoded =
        DecodeCall(read_buffer_, service_->options(), /*borrow=*/false, context_, message_log);
    const std::string model = read_buffer_.model();
    if (decoded.ok()) {
      const bool need_weights = decoded->inputs.need_weights;
      decoded->count_outcome = false;  // counted here, once answered (or failed)
      // A session's steps must reach Infer in stream order (docs/sessions.md): the next read
      // waits until this step is submitted; its answer still comes asynchronously.
      const bool in_order = !decoded->session_id.empty();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (in_order) {
          ++in_flight_;  // the submission itself: the stream cannot finish during Infer
        } else {
          processing_ = false;
          MaybeStartReadLocked();  // pipelining: read the next request while this one runs
        }
      }
      // Outside the lock: a refused request calls back inline. OnResult balances in_flight_.
      const Clock::time_point start = message_log.start;
      service_->core()->Infer(std::move(decoded.value()),
                              [this, index, need_weights, model, start](InferenceResponse result) {
                                OnResult(index, std::move(result), need_weights, model, start);
                              });
      if (!in_order) return;  // OnResult (maybe already run) takes it from here
    }
    std::lock_guard<std::mutex> lock(mu_);
    processing_ = false;
    --in_flight_;
    if (!decoded.ok()) RecordFailureLocked(index, decoded.status(), model, message_log.start);
  }
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

void ForwardStreamReactor::OnResult(int64_t index, InferenceResponse result, bool need_weights,
                                    const std::string& model, Clock::time_point start) {
  auto response = std::make_unique<v1::ForwardResponse>();
  // On the worker thread.
  const Status status = EncodeForwardResponse(result, need_weights, response.get());
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    if (status.ok()) {
      if (!failure_index_ || index < *failure_index_) {
        ready_.emplace(index, Answer{std::move(response), model, start});
      }
    } else {
      RecordFailureLocked(index, status, model, start);
    }
    MaybeWriteLocked();
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);  // last statement: OnDone may delete `this` right after
}

void ForwardStreamReactor::OnWriteDone(bool ok) {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      service_->core()->RecordOutcome(writing_.model, Status::Ok(), writing_.start,
                                      Protocol::kNative);
      ++next_write_index_;
      ++answered_;
    } else {
      broken_ = true;  // the client went away; nothing more can be written
      read_closed_ = true;
    }
    writing_ = Answer();
    MaybeWriteLocked();
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

void ForwardStreamReactor::OnCancel() {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    read_closed_ = true;
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

void ForwardStreamReactor::OnDone() {
  { std::lock_guard<std::mutex> lock(mu_); }  // let the thread that called Finish unlock first
  delete this;
}

void ForwardStreamReactor::MaybeStartReadLocked() {
  if (reading_ || processing_ || read_closed_ || broken_ || finishing_ || failure_index_) return;
  const int64_t pending =
      in_flight_ + static_cast<int64_t>(ready_.size()) + (writing_.response ? 1 : 0);
  if (pending >= service_->options().stream_window) return;  // resumed when answers go out
  reading_ = true;
  StartRead(&read_buffer_);
}

void ForwardStreamReactor::MaybeWriteLocked() {
  if (writing_.response || broken_ || finishing_) return;
  if (failure_index_ && next_write_index_ >= *failure_index_) return;
  auto it = ready_.find(next_write_index_);
  if (it == ready_.end()) return;
  writing_ = std::move(it->second);
  ready_.erase(it);
  StartWrite(writing_.response.get());
}

void ForwardStreamReactor::RecordFailureLocked(int64_t index, const Status& status,
                                               const std::string& model, Clock::time_point start) {
  if (failure_index_ && *failure_index_ <= index) return;  // an earlier failure wins
  failure_index_ = index;
  failure_model_ = model;
  failure_start_ = start;
  failure_ = Status(status.code(), "message " + std::to_string(index) + ": " + status.message());
  read_closed_ = true;  // stop reading; requests after the failure are not answered
  ready_.erase(ready_.upper_bound(index), ready_.end());
}

std::optional<Status> ForwardStreamReactor::ShouldFinishLocked() {
  if (finishing_ || in_flight_ > 0 || writing_.response) return std::nullopt;
  Status status = Status::Ok();
  if (failure_index_) {
    if (next_write_index_ < *failure_index_ && !broken_) return std::nullopt;
    status = failure_;
  } else if (broken_) {
    status = Cancelled("stream cancelled after " + std::to_string(answered_) + " answers");
  } else if (!read_closed_ || reading_ || !ready_.empty()) {
    return std::nullopt;
  }
  finishing_ = true;
  return status;
}

void ForwardStreamReactor::FinishNow(const Status& status) {
  // The failure that ends the stream is the one outcome counted besides the answers written.
  if (failure_index_) {
    service_->core()->RecordOutcome(failure_model_, failure_, failure_start_, Protocol::kNative);
  }
  LogOutcome(log_, status, "answers=" + std::to_string(answered_));
  Finish(codec::ToGrpcStatus(status));
}

}  // namespace mha::serve
