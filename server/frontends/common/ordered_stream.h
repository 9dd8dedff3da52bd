// The state machine of a pipelined inference stream (mha.v1 ForwardStream, the Open Inference
// Protocol's ModelStreamInfer), written once: messages are read and decoded one at a time, up to
// `window` of them are in the core at once (the next is read while earlier ones compute), answers
// are written strictly in message order, a session's steps reach Infer in stream order (the next
// read waits until the step is submitted), and the stream ends OK on half-close once every answer
// is written, CANCELLED when a write fails or the call is cancelled.
//
// A failed message (decoding, or encoding its answer) is the policy's choice:
//   kErrorsEndStream = true   (mha.v1) the first failing message (index N) ends the stream once
//                             the answers before it are written: status = its code, message
//                             "message N: ...". Outcomes are counted here, once each: every
//                             answer written, and the failure that ends the stream; messages after
//                             it are never answered nor counted.
//   kErrorsEndStream = false  (OIP) the failure is answered in its place (Policy::ErrorAnswer) and
//                             the stream goes on; the core counts what it answers, a message that
//                             does not decode is counted here.
// Finish is always the last thing a method does, after unlocking, and only once no core callback
// is outstanding, so OnDone can delete the reactor safely.
//
// Policy: types Request, Response, Pending (what encoding an answer needs; copyable); constants
// kMethod (the log's method), kProtocol, kErrorsEndStream; members
//   InferenceServer* core() const;  int window() const;
//   static const std::string& ModelOf(const Request&);
//   StatusOr<InferenceRequest> Decode(const Request&, grpc::ServerContextBase*,
//                                     const RequestLog&, Pending*) const;
//   Status Encode(const Request&, const Pending&, const InferenceResponse&, Response*) const;
//                 (may be static; runs on the core's callback thread, once per decoded message)
//   static std::unique_ptr<Response> ErrorAnswer(const Request&, const Status&);  //
//   !kErrorsEndStream
// Each message is kept until its answer: Decode may borrow its bytes.
//
// A stream whose messages are not inference requests (mha.v1 LayerSteps) names its own types
// Decoded and Result (instead of InferenceRequest / InferenceResponse, which Decode then returns
// and Encode takes) and has the members
//   void Run(Decoded, std::function<void(Result)>) const;  (instead of core()->Infer)
//   static bool InOrder(const Decoded&);  (the next read waits until it is submitted)
//
// Base: the API the stream is served on: the callback API's grpc::ServerBidiReactor (the default),
// or the completion-queue API's CqBidiReactor (cq_stream.h), which has the same interface; the
// reactor is constructed with the call's context and then Base's own arguments.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "mha/status.h"
#include "server/frontends/common/grpc_call.h"
#include "server/serving/inference_server.h"

namespace mha::serve {

namespace internal {
// A policy's decoded message and its outcome: InferenceRequest / InferenceResponse unless it
// names its own.
template <class P, class = void>
struct StreamMessages {
  using Decoded = InferenceRequest;
  using Result = InferenceResponse;
};
template <class P>
struct StreamMessages<P, std::void_t<typename P::Decoded>> {
  using Decoded = typename P::Decoded;
  using Result = typename P::Result;
};
}  // namespace internal

template <class Policy,
          class Base = grpc::ServerBidiReactor<typename Policy::Request, typename Policy::Response>>
class OrderedStreamReactor final : public Base {
 public:
  using Request = typename Policy::Request;
  using Response = typename Policy::Response;
  using Pending = typename Policy::Pending;
  using Decoded = typename internal::StreamMessages<Policy>::Decoded;
  using Result = typename internal::StreamMessages<Policy>::Result;

  template <class... BaseArgs>
  OrderedStreamReactor(Policy policy, grpc::ServerContextBase* context, BaseArgs&&... base_args)
      : Base(std::forward<BaseArgs>(base_args)...),
        policy_(std::move(policy)),
        context_(context),
        log_(StartRequest(context, Policy::kMethod)) {
    std::lock_guard<std::mutex> lock(mu_);
    MaybeStartReadLocked();
  }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override {
    { std::lock_guard<std::mutex> lock(mu_); }  // let the thread that called Finish unlock first
    delete this;
  }

 private:
  // An answer waiting to be written, with what counting it needs once it is.
  struct Answer {
    std::unique_ptr<Response> response;
    std::string model;  // as the message asked
    Clock::time_point start;
  };

  // Decodes message `index` and submits it; its outcome arrives through Settle.
  void Submit(int64_t index, std::shared_ptr<const Request> request);
  void OnResult(int64_t index, const Request& request, const Pending& pending, const Result& result,
                Clock::time_point start);
  // A session's steps reach the core in stream order (the next read waits for the submission).
  static bool InOrder(const Decoded& decoded) {
    if constexpr (std::is_same_v<Decoded, InferenceRequest>) {
      return !decoded.session_id.empty();
    } else {
      return Policy::InOrder(decoded);
    }
  }
  void Run(Decoded decoded, std::function<void(Result)> done) {
    if constexpr (std::is_same_v<Decoded, InferenceRequest>) {
      policy_.core()->Infer(std::move(decoded), std::move(done));
    } else {
      policy_.Run(std::move(decoded), std::move(done));
    }
  }
  // Message `index` failed (decoding when `decoding`, else encoding its answer).
  void Fail(int64_t index, const Request& request, const Status& status, Clock::time_point start,
            bool decoding);
  // Message `index` is done: `answer` to write, or `failure` (ends the stream). `decoding`: it
  // was still being decoded (reads resume).
  void Settle(int64_t index, Answer answer, const Status* failure, bool decoding);
  // Each returns with mu_ held; they start reads and writes and record failures.
  void MaybeStartReadLocked();
  void MaybeWriteLocked();
  void RecordFailureLocked(int64_t index, const Status& status, const std::string& model,
                           Clock::time_point start);
  // The final status when the stream should be finished now (sets finishing_); the caller then
  // calls FinishNow with it after unlocking, as its last statement.
  std::optional<Status> ShouldFinishLocked();
  void FinishNow(const Status& status);

  const Policy policy_;
  grpc::ServerContextBase* const context_;
  const RequestLog log_;

  std::mutex mu_;
  std::shared_ptr<Request> read_buffer_;  // the outstanding read's message
  bool reading_ = false;                  // a StartRead is outstanding
  bool processing_ = false;   // a message is being decoded (or a session step submitted)
  bool read_closed_ = false;  // client half-closed, or we stopped reading
  bool broken_ = false;       // a write failed or the call was cancelled
  bool finishing_ = false;
  int64_t next_read_index_ = 0;
  int64_t next_write_index_ = 0;
  int in_flight_ = 0;  // read, outcome not settled yet
  std::map<int64_t, Answer> ready_;
  Answer writing_;  // the outstanding write (response null when none)
  std::optional<int64_t> failure_index_;
  Status failure_;
  std::string failure_model_;
  Clock::time_point failure_start_;
  int64_t answered_ = 0;
};

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::OnReadDone(bool ok) {
  std::shared_ptr<const Request> request;
  int64_t index = -1;
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (!ok || finishing_ || failure_index_ || broken_) {
      read_closed_ = true;
      finish = ShouldFinishLocked();
    } else {
      index = next_read_index_++;
      request = std::move(read_buffer_);
      processing_ = true;  // no StartRead until it is decoded
      ++in_flight_;        // and the stream cannot finish under us
    }
  }
  if (index >= 0) return Submit(index, std::move(request));
  if (finish) FinishNow(*finish);
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::Submit(int64_t index,
                                                std::shared_ptr<const Request> request) {
  RequestLog message_log = log_;
  message_log.start = Clock::now();
  message_log.request_id += "#" + std::to_string(index);
  const Clock::time_point start = message_log.start;
  Pending pending{};
  auto decoded = policy_.Decode(*request, context_, message_log, &pending);
  if (!decoded.ok()) return Fail(index, *request, decoded.status(), start, /*decoding=*/true);
  if constexpr (Policy::kErrorsEndStream) decoded->count_outcome = false;  // counted here
  // A session's steps must reach Infer in stream order (docs/sessions.md): the next read waits
  // until this step is submitted; its answer still comes asynchronously.
  const bool in_order = InOrder(*decoded);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_order) {
      ++in_flight_;  // the submission itself: the stream cannot finish during Infer
    } else {
      processing_ = false;
      MaybeStartReadLocked();  // pipelining: read the next message while this one runs
    }
  }
  // Outside the lock: a refused request calls back inline. OnResult settles in_flight_.
  Run(std::move(decoded.value()), [this, index, request, pending, start](Result result) {
    OnResult(index, *request, pending, result, start);
  });
  if (!in_order) return;  // OnResult (maybe already run) takes it from here
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    processing_ = false;
    --in_flight_;
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::OnResult(int64_t index, const Request& request,
                                                  const Pending& pending, const Result& result,
                                                  Clock::time_point start) {
  auto response = std::make_unique<Response>();  // on the worker thread
  const Status status = policy_.Encode(request, pending, result, response.get());
  if (!status.ok()) return Fail(index, request, status, start, /*decoding=*/false);
  Settle(index, Answer{std::move(response), Policy::ModelOf(request), start}, nullptr, false);
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::Fail(int64_t index, const Request& request,
                                              const Status& status, Clock::time_point start,
                                              bool decoding) {
  const std::string& model = Policy::ModelOf(request);
  if constexpr (Policy::kErrorsEndStream) {
    Settle(index, Answer{nullptr, model, start}, &status, decoding);
  } else {
    // The core counted what it answered; a message it never saw is counted here.
    if (decoding) policy_.core()->CountRequest(model, status, start, Policy::kProtocol);
    Settle(index, Answer{Policy::ErrorAnswer(request, status), model, start}, nullptr, decoding);
  }
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::Settle(int64_t index, Answer answer, const Status* failure,
                                                bool decoding) {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    if (decoding) processing_ = false;
    if (failure != nullptr) {
      RecordFailureLocked(index, *failure, answer.model, answer.start);
    } else if (!failure_index_ || index < *failure_index_) {
      ready_.emplace(index, std::move(answer));
    }
    MaybeWriteLocked();
    MaybeStartReadLocked();
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);  // last statement: OnDone may delete `this` right after
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::OnWriteDone(bool ok) {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      if constexpr (Policy::kErrorsEndStream) {
        policy_.core()->CountRequest(writing_.model, Status::Ok(), writing_.start,
                                     Policy::kProtocol);
      }
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

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::OnCancel() {
  std::optional<Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    read_closed_ = true;
    LogCancelled(log_, answered_, in_flight_);  // from here on, nothing more is written
    finish = ShouldFinishLocked();
  }
  if (finish) FinishNow(*finish);
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::MaybeStartReadLocked() {
  if (reading_ || processing_ || read_closed_ || broken_ || finishing_ || failure_index_) return;
  const int64_t pending =
      in_flight_ + static_cast<int64_t>(ready_.size()) + (writing_.response ? 1 : 0);
  if (pending >= policy_.window()) return;  // resumed when answers go out
  reading_ = true;
  read_buffer_ = std::make_shared<Request>();
  this->StartRead(read_buffer_.get());
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::MaybeWriteLocked() {
  if (writing_.response || broken_ || finishing_) return;
  if (failure_index_ && next_write_index_ >= *failure_index_) return;
  auto it = ready_.find(next_write_index_);
  if (it == ready_.end()) return;
  writing_ = std::move(it->second);
  ready_.erase(it);
  this->StartWrite(writing_.response.get());
}

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::RecordFailureLocked(int64_t index, const Status& status,
                                                             const std::string& model,
                                                             Clock::time_point start) {
  if (failure_index_ && *failure_index_ <= index) return;  // an earlier failure wins
  failure_index_ = index;
  failure_model_ = model;
  failure_start_ = start;
  failure_ = Status(status.code(), "message " + std::to_string(index) + ": " + status.message());
  read_closed_ = true;  // stop reading; messages after the failure are not answered
  ready_.erase(ready_.upper_bound(index), ready_.end());
}

template <class Policy, class Base>
std::optional<Status> OrderedStreamReactor<Policy, Base>::ShouldFinishLocked() {
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

template <class Policy, class Base>
void OrderedStreamReactor<Policy, Base>::FinishNow(const Status& status) {
  // The failure that ends the stream is the one outcome counted besides the answers written.
  if (failure_index_) {
    policy_.core()->CountRequest(failure_model_, failure_, failure_start_, Policy::kProtocol);
  }
  LogOutcome(log_, status, "answers=" + std::to_string(answered_));
  this->Finish(codec::ToGrpcStatus(status));
}

}  // namespace mha::serve
