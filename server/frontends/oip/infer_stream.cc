#include "server/frontends/oip/infer_stream.h"

#include <string>
#include <utility>
#include <vector>

#include "proto/wire/status_convert.h"
#include "server/frontends/oip/sequence.h"

namespace mha::serve::oip {

std::unique_ptr<inference::ModelStreamInferResponse> StreamError(
    const inference::ModelInferRequest& request, const Status& status) {
  auto response = std::make_unique<inference::ModelStreamInferResponse>();
  response->set_error_message(std::string(StatusCodeName(status.code())) + ": " + status.message());
  response->mutable_infer_response()->set_model_name(request.model_name());
  response->mutable_infer_response()->set_id(request.id());
  return response;
}

InferStreamReactor::InferStreamReactor(InferenceServer* core, const OipFrontendOptions& options,
                                       grpc::CallbackServerContext* context)
    : core_(core),
      options_(options),
      context_(context),
      log_(StartRequest(context, "ModelStreamInfer")) {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeStartReadLocked();
}

void InferStreamReactor::OnReadDone(bool ok) {
  std::shared_ptr<inference::ModelInferRequest> request;
  int64_t index = -1;
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (!ok || finishing_ || broken_) {
      read_closed_ = true;
    } else {
      index = next_read_index_++;
      request = std::move(read_buffer_);
      ++in_flight_;            // the stream cannot finish before its answer
      MaybeStartReadLocked();  // pipelining: read the next request while this one runs
    }
    finish = ShouldFinishLocked();
  }
  if (index >= 0) {
    Submit(index, std::move(request));  // finish is empty: in_flight_ > 0 until OnAnswer
    return;
  }
  if (finish) FinishNow(*finish);
}

void InferStreamReactor::Submit(int64_t index,
                                std::shared_ptr<inference::ModelInferRequest> request) {
  RequestLog message_log = log_;
  message_log.start = Clock::now();
  message_log.request_id += "#" + std::to_string(index);
  auto decoded = DecodeCall(*request, options_, *core_, context_, message_log);
  if (!decoded.ok()) {
    core_->RecordOutcome(request->model_name(), decoded.status(), message_log.start,
                         Protocol::kOip);
    OnAnswer(index, StreamError(*request, decoded.status()));
    return;
  }
  InferCall& call = decoded.value();
  if (const Status begun = BeginSequence(core_, &call); !begun.ok()) {  // sequence.h
    core_->RecordOutcome(request->model_name(), begun, message_log.start, Protocol::kOip);
    OnAnswer(index, StreamError(*request, begun));
    return;
  }
  std::string session = call.request.session_id;
  // `done` may run inline (refused) or on a scheduler worker; `request` lives until then.
  core_->Infer(std::move(call.request), [this, index, request, outputs = std::move(call.outputs),
                                         sequence = std::move(call.sequence),
                                         session = std::move(session)](InferenceResponse result) {
    EndSequence(core_, sequence, session, result.status);
    auto response = std::make_unique<Response>();
    const Status status = EncodeModelInferResponse(result, outputs, request->id(),
                                                   response->mutable_infer_response());
    OnAnswer(index, status.ok() ? std::move(response) : StreamError(*request, status));
  });
}

void InferStreamReactor::OnAnswer(int64_t index, std::unique_ptr<Response> response) {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    ready_.emplace(index, std::move(response));
    MaybeWriteLocked();
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);  // last statement: OnDone may delete `this` right after
}

void InferStreamReactor::OnWriteDone(bool ok) {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      ++next_write_index_;
      ++answered_;
    } else {
      broken_ = true;  // the client went away; nothing more can be written
    }
    writing_.reset();
    MaybeWriteLocked();
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

void InferStreamReactor::OnCancel() {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

void InferStreamReactor::OnDone() {
  { std::lock_guard<std::mutex> lock(mu_); }  // let the thread that called Finish unlock first
  delete this;
}

void InferStreamReactor::MaybeStartReadLocked() {
  if (reading_ || read_closed_ || broken_ || finishing_) return;
  const int64_t pending = in_flight_ + static_cast<int64_t>(ready_.size()) + (writing_ ? 1 : 0);
  if (pending >= options_.stream_window) return;  // resumed when answers go out
  reading_ = true;
  read_buffer_ = std::make_shared<inference::ModelInferRequest>();
  StartRead(read_buffer_.get());
}

void InferStreamReactor::MaybeWriteLocked() {
  if (writing_ || broken_ || finishing_) return;
  auto it = ready_.find(next_write_index_);
  if (it == ready_.end()) return;
  writing_ = std::move(it->second);
  ready_.erase(it);
  StartWrite(writing_.get());
}

std::optional<Status> InferStreamReactor::ShouldFinishLocked() {
  if (finishing_ || in_flight_ > 0 || writing_) return std::nullopt;
  Status status = Status::Ok();
  if (broken_) {
    status = Cancelled("stream cancelled after " + std::to_string(answered_) + " answers");
  } else if (!read_closed_ || reading_ || !ready_.empty()) {
    return std::nullopt;
  }
  finishing_ = true;
  return status;
}

void InferStreamReactor::FinishNow(const Status& status) {
  LogOutcome(log_, status, "answers=" + std::to_string(answered_));
  Finish(codec::ToGrpcStatus(status));
}

}  // namespace mha::serve::oip
