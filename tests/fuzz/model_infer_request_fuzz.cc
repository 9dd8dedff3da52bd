// Open Inference Protocol ModelInferRequest bytes -> the oip front end's decoding and the same
// validation as mha.v1, as a ModelInfer call goes: parse the protobuf, DecodeModelInferRequest
// (input names and datatypes, raw or typed contents read in place, parameters, requested
// outputs), ServerCore::Infer on the built-in default model (E=512, H=8), and for an accepted
// request the forward pass and EncodeModelInferResponse. Limits are small so that every accepted
// pass is cheap (fuzz_server_core.h); nothing may crash, leak or trip a sanitizer.
#include "fuzz_common.h"
#include "fuzz_server_core.h"
#include "inference/grpc_service.pb.h"
#include "server/frontends/oip/infer_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzServerCore();  // before parsing: it silences protobuf's log
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  mha::serve::oip::DecodeOptions options;
  options.max_message_bytes = 4 << 20;
  options.borrow = true;
  auto decoded = mha::serve::oip::DecodeModelInferRequest(request, options);
  if (!decoded.ok()) return 0;
  mha::serve::InferenceResponse response = FuzzInfer(std::move(decoded->request));
  if (response.status.ok()) {
    inference::ModelInferResponse out;
    (void)mha::serve::oip::EncodeModelInferResponse(response, decoded->outputs, decoded->id, &out);
  }
  return 0;
}
