// ForwardRequest bytes -> the wire codec and request validation, as a unary call goes:
// parse the protobuf, DecodeForwardRequest (tensor headers, byte counts, borrowed tensors),
// ServerCore::Infer (model, shapes, limits, the response/work budget) on the built-in default
// model, and for an accepted request the forward pass and EncodeForwardResponse. Limits are small
// so that every accepted pass is cheap; nothing may crash, leak or trip a sanitizer.
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>

#include <google/protobuf/stubs/logging.h>

#include "frontends/grpc_v1/forward_request.h"
#include "fuzz_common.h"
#include "mha/v1/attention.pb.h"
#include "serving/server_core.h"

namespace {

constexpr int64_t kMaxMessageBytes = 4 << 20;

mha::serve::ServerCore* Core() {
  static mha::serve::ServerCore* core = [] {
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" lines for every such input
    mha::serve::ServerCoreOptions options;  // no repository: the built-in default model
    options.batching = false;               // DirectRunner: one pass per request
    options.limits.max_batch_size = 4;
    options.limits.max_sequence_length = 64;
    options.limits.max_response_bytes = 8 << 20;
    options.limits.max_work_bytes = 32 << 20;
    auto created = mha::serve::ServerCore::Create(options);
    if (!created.ok()) std::abort();
    std::promise<void> loaded;
    created.value()->StartLoading([&loaded] { loaded.set_value(); });
    loaded.get_future().wait();
    return created.value().release();  // lives for the process (its threads too)
  }();
  return core;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mha::serve::ServerCore* core = Core();
  mha::v1::ForwardRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto decoded = mha::serve::DecodeForwardRequest(request, kMaxMessageBytes, /*borrow=*/true);
  if (!decoded.ok()) return 0;
  std::promise<mha::serve::InferenceResponse> answer;
  core->Infer(std::move(decoded.value()),
              [&answer](mha::serve::InferenceResponse r) { answer.set_value(std::move(r)); });
  mha::serve::InferenceResponse response = answer.get_future().get();
  if (response.status.ok()) {
    mha::v1::ForwardResponse out;
    (void)mha::serve::EncodeForwardResponse(response, request.need_weights(), &out);
  }
  return 0;
}
