// POST /v2/models/{m}[/versions/{v}]/infer: body -> ModelInferRequest (infer_body.h) -> the
// Open Inference Protocol's decoder -> ServerCore::Infer -> its encoder -> JSON (+ binary).
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "server/frontends/oip/infer_request.h"
#include "server/frontends/oip/sequence.h"
#include "server/frontends/rest/http_status.h"
#include "server/frontends/rest/infer_body.h"
#include "server/frontends/rest/infer_response.h"
#include "server/frontends/rest/rest_handlers.h"

namespace mha::serve::rest {
namespace {

// What the decoded request leaves to the answer: the body (the tensors borrow its bytes) and
// the outputs to encode.
struct PreparedCall {
  InferBody body;
  oip::InferCall call;
};

StatusOr<std::unique_ptr<PreparedCall>> Prepare(const RestContext& c, const httplib::Request& req,
                                                const RequestLog& log) {
  std::optional<std::string> header_length;
  if (req.has_header(kHeaderLengthHeader)) {
    header_length = req.get_header_value(kHeaderLengthHeader);
  }
  auto body = ParseInferBody(req.body, header_length, InferBodyLimits{});
  if (!body.ok()) return body.status();
  auto prepared = std::make_unique<PreparedCall>();
  prepared->body = std::move(body.value());
  inference::ModelInferRequest& request = prepared->body.request;
  request.set_model_name(ModelOf(req));
  request.set_model_version(VersionOf(req));
  oip::DecodeOptions decode;
  decode.max_message_bytes = c.options->max_message_bytes;
  decode.borrow = true;
  decode.shm = c.options->shm;
  auto decoded = oip::DecodeModelInferRequest(request, decode);
  if (!decoded.ok()) return decoded.status();
  prepared->call = std::move(decoded.value());
  InferenceRequest& r = prepared->call.request;
  r.protocol = Protocol::kRest;
  r.start = log.start;
  r.request_id = log.request_id;
  oip::ApplyTimeout(&prepared->call);  // parameters.timeout: the request's deadline
  return prepared;
}

// Runs the request on the core and waits for its answer (this connection's thread blocks; the
// core's threads do not). As it blocks anyway, it may run the pass itself when the model is idle
// (InferenceRequest::caller).
InferenceResponse RunOnCore(InferenceServer* core, InferenceRequest request) {
  request.caller = CallerThread(/*may_run_pass=*/true, nullptr, nullptr);
  auto answer = std::make_shared<std::promise<InferenceResponse>>();
  std::future<InferenceResponse> result = answer->get_future();
  core->Infer(std::move(request),
              [answer](InferenceResponse response) { answer->set_value(std::move(response)); });
  return result.get();
}

}  // namespace

void HandleInfer(const RestContext& c, const httplib::Request& req, httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ModelInfer");
  auto prepared = Prepare(c, req, log);
  if (!prepared.ok()) {
    c.core->CountRequest(ModelOf(req), prepared.status(), log.start, Protocol::kRest);
    return Reply(res, log, prepared.status());
  }
  PreparedCall& p = *prepared.value();
  if (const Status begun = oip::BeginSequence(c.core, &p.call); !begun.ok()) {  // sequence.h
    c.core->CountRequest(ModelOf(req), begun, log.start, Protocol::kRest);
    return Reply(res, log, begun);
  }
  const std::string session = p.call.request.session_id;
  const InferenceResponse result = RunOnCore(c.core, std::move(p.call.request));
  oip::EndSequence(c.core, p.call.sequence, session, result.status);
  inference::ModelInferResponse response;
  const Status status =
      oip::EncodeModelInferResponse(result, p.call.outputs, p.call.id, &response, &p.call.shm);
  if (!status.ok()) return Reply(res, log, status);
  RestResponse out = EncodeInferResponse(&response, p.body);
  LogOutcome(log, status, InferDetail(result.model, result.queue_us, result.compute_us));
  res.status = 200;
  if (out.header_length) {
    res.set_header(kHeaderLengthHeader, std::to_string(*out.header_length));
  }
  res.set_header("Content-Type",
                 out.header_length ? "application/octet-stream" : "application/json");
  res.body = std::move(out.body);  // no copy (set_content copies)
}

}  // namespace mha::serve::rest
