// The ForwardStream reactor: reads requests, submits up to `stream_window` of them to the core
// at once, writes the answers strictly in request order. The first failing request (index N)
// ends the stream once the answers before it are written: status = its code, message
// "message N: ...". Outcomes are counted here, once each: every answer written, and the failure
// that ends the stream; messages after it (computed or not) are never answered nor counted. Finish
// is always the last thing a method does, after unlocking, and only once no runner callback is
// outstanding, so OnDone can delete the reactor safely.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/grpc_v1/attention_service.h"
#include "server/frontends/grpc_v1/request_log.h"

namespace mha::serve {

class ForwardStreamReactor final
    : public grpc::ServerBidiReactor<v1::ForwardRequest, v1::ForwardResponse> {
 public:
  ForwardStreamReactor(AttentionServiceImpl* service, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void OnResult(int64_t index, InferenceResponse result, bool need_weights,
                const std::string& model, Clock::time_point start);
  // Each returns with mu_ held; they start reads/writes and record failures.
  void MaybeStartReadLocked();
  void MaybeWriteLocked();
  // The final status when the stream should be finished now (sets finishing_); the caller then
  // calls FinishNow with it after unlocking, as its last statement.
  std::optional<Status> ShouldFinishLocked();
  void RecordFailureLocked(int64_t index, const Status& status, const std::string& model,
                           Clock::time_point start);
  void FinishNow(const Status& status);

  AttentionServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const RequestLog log_;

  std::mutex mu_;
  v1::ForwardRequest read_buffer_;
  bool reading_ = false;      // a StartRead is outstanding
  bool processing_ = false;   // OnReadDone is decoding read_buffer_
  bool read_closed_ = false;  // client half-closed, or we stopped reading
  bool broken_ = false;       // a write failed or the call was cancelled
  bool finishing_ = false;
  int64_t next_read_index_ = 0;
  int64_t next_write_index_ = 0;
  int in_flight_ = 0;  // being decoded or in the runner, result not back yet
  // An answer waiting to be written, with what counting it needs once it is.
  struct Answer {
    std::unique_ptr<v1::ForwardResponse> response;
    std::string model;
    Clock::time_point start;
  };
  std::map<int64_t, Answer> ready_;
  Answer writing_;  // the outstanding write (response null when none)
  std::optional<int64_t> failure_index_;
  Status failure_;
  std::string failure_model_;  // the failing message's model, as requested
  Clock::time_point failure_start_;
  int64_t answered_ = 0;
};

}  // namespace mha::serve
