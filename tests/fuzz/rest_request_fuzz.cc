// KServe v2 REST request bodies -> the REST front end's parser (server/frontends/rest/
// infer_body.h: bounded JSON, tensor data collected while parsing, the binary tensor extension's
// framing), the Open Inference Protocol decoder, ServerCore::Infer on the built-in default model
// (E=512, H=8; small limits: fuzz_server_core.h) and, for an accepted request, both encoders
// (OIP, then REST JSON + binary). Input: a body, or 'B' + a little-endian uint16 JSON length +
// a body in the binary framing (the Inference-Header-Content-Length header). Nothing may crash,
// leak or trip a sanitizer. Seeds: tests/fuzz/seeds/rest_request (JSON and framed bodies).
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "fuzz_server_core.h"
#include "server/frontends/oip/infer_request.h"
#include "server/frontends/rest/infer_body.h"
#include "server/frontends/rest/infer_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzServerCore();
  std::string_view body(reinterpret_cast<const char*>(data), size);
  std::optional<std::string> header;
  if (size >= 3 && data[0] == 'B') {
    header = std::to_string(data[1] | (data[2] << 8));
    body.remove_prefix(3);
  }
  auto parsed = mha::serve::rest::ParseInferBody(body, header, {});
  if (!parsed.ok()) return 0;
  parsed->request.set_model_name("");  // the default model (a URL's name in the server)
  mha::serve::oip::DecodeOptions options;
  options.max_message_bytes = 4 << 20;
  options.borrow = true;
  auto decoded = mha::serve::oip::DecodeModelInferRequest(parsed->request, options);
  if (!decoded.ok() || !decoded->sequence.id.empty()) return 0;  // sequences: service tests
  mha::serve::InferenceResponse response = FuzzInfer(std::move(decoded->request));
  if (response.status.ok()) {
    inference::ModelInferResponse out;
    if (mha::serve::oip::EncodeModelInferResponse(response, decoded->outputs, decoded->id, &out)
            .ok()) {
      (void)mha::serve::rest::EncodeInferResponse(&out, *parsed);
    }
  }
  return 0;
}
