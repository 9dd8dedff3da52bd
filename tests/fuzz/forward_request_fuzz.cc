// ForwardRequest bytes -> the wire codec and request validation, as a unary call goes:
// parse the protobuf, DecodeForwardRequest (tensor headers, byte counts, borrowed tensors),
// ServerCore::Infer (model, shapes, limits, the response/work budget) on the built-in default
// model, and for an accepted request the forward pass and EncodeForwardResponse. Tensors and
// output places may name the shared-memory region "fuzz" (fuzz_shm.h). Limits are small
// so that every accepted pass is cheap (fuzz_server_core.h); nothing may crash, leak or trip a
// sanitizer.
#include "fuzz_common.h"
#include "fuzz_server_core.h"
#include "fuzz_shm.h"
#include "mha/v1/attention.pb.h"
#include "server/frontends/grpc_v1/forward_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzServerCore();  // before parsing: it silences protobuf's log
  mha::v1::ForwardRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  mha::serve::ShmPlan shm;
  auto decoded =
      mha::serve::DecodeForwardRequest(request, 4 << 20, /*borrow=*/true, FuzzShmRegistry(), &shm);
  if (!decoded.ok()) return 0;
  mha::serve::InferenceResponse response = FuzzInfer(std::move(decoded.value()));
  if (response.status.ok()) {
    mha::v1::ForwardResponse out;
    (void)mha::serve::EncodeForwardResponse(response, request.need_weights(), &out, nullptr, &shm);
  }
  return 0;
}
