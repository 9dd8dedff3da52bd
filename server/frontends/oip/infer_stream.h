// ModelStreamInfer (Triton's streaming extension) as a bidi reactor, pipelined like mha.v1
// ForwardStream: up to `stream_window` requests of one stream are decoded and in the core at once
// (the next one is read while earlier ones compute), and the answers are written strictly in
// request order. A request that fails does not end the stream: its answer carries error_message
// ("CODE: message", the same message as ModelInfer) and infer_response.id/model_name; the stream
// ends OK when the client half-closes and every answer is written, CANCELLED when a write fails or
// the call is cancelled. Every request is counted once, by ServerCore or by RecordOutcome here.
// Finish is the last thing a method does, after unlocking, once no core callback is outstanding,
// so OnDone can delete the reactor safely.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "inference/grpc_service.grpc.pb.h"
#include "server/frontends/grpc_v1/request_log.h"
#include "server/frontends/oip/inference_service.h"

namespace mha::serve::oip {

class InferStreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  // `core` must outlive the stream; `options` is copied.
  InferStreamReactor(InferenceServer* core, const OipFrontendOptions& options,
                     grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  using Response = inference::ModelStreamInferResponse;
  // Decodes request `index` and submits it; its answer arrives through OnAnswer.
  void Submit(int64_t index, std::shared_ptr<inference::ModelInferRequest> request);
  void OnAnswer(int64_t index, std::unique_ptr<Response> response);
  // Each returns with mu_ held; they start reads and writes.
  void MaybeStartReadLocked();
  void MaybeWriteLocked();
  // The final status when the stream should finish now (sets finishing_); the caller calls
  // FinishNow with it after unlocking, as its last statement.
  std::optional<Status> ShouldFinishLocked();
  void FinishNow(const Status& status);

  InferenceServer* const core_;
  const OipFrontendOptions options_;
  grpc::CallbackServerContext* const context_;
  const RequestLog log_;

  std::mutex mu_;
  // The outstanding read's message. Each request keeps its own message until answered: the
  // decoded tensors borrow its bytes.
  std::shared_ptr<inference::ModelInferRequest> read_buffer_;
  bool reading_ = false;      // a StartRead is outstanding
  bool read_closed_ = false;  // the client half-closed
  bool broken_ = false;       // a write failed or the call was cancelled
  bool finishing_ = false;
  int64_t next_read_index_ = 0;
  int64_t next_write_index_ = 0;
  int in_flight_ = 0;  // read, answer not back yet
  std::map<int64_t, std::unique_ptr<Response>> ready_;
  std::unique_ptr<Response> writing_;  // the outstanding write
  int64_t answered_ = 0;
};

// The stream answer for a request that failed: error_message "CODE: message", the request's id
// and model name.
std::unique_ptr<inference::ModelStreamInferResponse> StreamError(
    const inference::ModelInferRequest& request, const Status& status);

}  // namespace mha::serve::oip
