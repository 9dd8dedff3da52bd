// Open Inference Protocol ModelInferRequest bytes -> the oip front end's decoding and the same
// validation as mha.v1, as a ModelInfer call goes: parse the protobuf, DecodeModelInferRequest
// (input names and datatypes, raw or typed contents read in place, parameters, requested
// outputs), ServerCore::Infer on the built-in default model (E=512, H=8), and for an accepted
// request the forward pass and EncodeModelInferResponse. Limits are small so that every accepted
// pass is cheap; nothing may crash, leak or trip a sanitizer.
#include <cstdlib>
#include <future>
#include <memory>

#include <google/protobuf/stubs/logging.h>

#include "frontends/oip/infer_request.h"
#include "fuzz_common.h"
#include "inference/grpc_service.pb.h"
#include "serving/server_core.h"

namespace {

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
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  mha::serve::oip::DecodeOptions options;
  options.max_message_bytes = 4 << 20;
  options.borrow = true;
  auto decoded = mha::serve::oip::DecodeModelInferRequest(request, options);
  if (!decoded.ok()) return 0;
  std::promise<mha::serve::InferenceResponse> answer;
  core->Infer(std::move(decoded->request),
              [&answer](mha::serve::InferenceResponse r) { answer.set_value(std::move(r)); });
  mha::serve::InferenceResponse response = answer.get_future().get();
  if (response.status.ok()) {
    inference::ModelInferResponse out;
    (void)mha::serve::oip::EncodeModelInferResponse(response, decoded->outputs, decoded->id,
                                                    &out);
  }
  return 0;
}
