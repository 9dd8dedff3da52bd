// Triton's model repository extension over REST, on the model lifecycle
// (server/serving/model_controller.h) as gRPC's RepositoryIndex / RepositoryModelLoad /
// RepositoryModelUnload (oip/repository_rpcs.cc): the same admin token (`Authorization: Bearer
// <token>` header), modes, parameters check and messages.
//   POST /v2/repository/index                 {"ready": bool}? ->
//   [{"name","version","state","reason"}] POST /v2/repository/models/{m}/load       {"parameters":
//   {}}? -> {} once loaded POST /v2/repository/models/{m}/unload     {"parameters":
//   {"unload_dependents": bool}}? -> {}
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "mha/text.h"
#include "server/frontends/common/admin_auth.h"
#include "server/frontends/oip/model_metadata.h"
#include "server/frontends/rest/proto_json.h"
#include "server/frontends/rest/rest_handlers.h"

namespace mha::serve::rest {
namespace {

Status Authorize(const RestContext& c, const httplib::Request& req) {
  if (!req.has_header("Authorization")) return AuthorizeAdmin(std::nullopt, c.options->admin_token);
  const std::string value = req.get_header_value("Authorization");
  return AuthorizeAdmin(value, c.options->admin_token);
}

// The request body: empty, or a JSON object of at most a few keys (bounded like infer bodies).
StatusOr<nlohmann::json> SmallBody(const httplib::Request& req) {
  if (req.body.empty()) return nlohmann::json::object();
  if (req.body.size() > 65536) return InvalidArgument("request body: at most 65536 bytes here");
  nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
  if (!body.is_object()) return InvalidArgument("request body: must be a JSON object");
  return body;
}

// Load takes no parameters (the folder loads as it is), unload only unload_dependents.
Status CheckParameters(const nlohmann::json& body, const char* accepted) {
  const auto it = body.find("parameters");
  if (it == body.end()) return Status::Ok();
  if (!it->is_object()) return InvalidArgument("parameters: must be an object");
  for (const auto& item : it->items()) {
    if (accepted != nullptr && item.key() == accepted) continue;
    return InvalidArgument("parameters: '" + Abbreviate(item.key()) +
                           "' is not supported (the server loads the model folder of the "
                           "repository as it is; no config or file overrides)");
  }
  return Status::Ok();
}

Status NoController(const char* rpc) {
  return FailedPrecondition(std::string(rpc) +
                            ": model control is off; start the server with "
                            "--model-control-mode explicit (or poll) to load and unload models");
}

}  // namespace

void HandleRepositoryIndex(const RestContext& c, const httplib::Request& req,
                           httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest RepositoryIndex");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  auto body = SmallBody(req);
  if (!body.ok()) return Reply(res, log, body.status());
  const bool ready_only = body->value("ready", false);
  StatusOr<std::vector<IndexEntry>> index = NoController("RepositoryIndex");
  if (c.options->controller != nullptr) index = c.options->controller->RepositoryIndex();
  if (!index.ok() && index.status().code() == StatusCode::kFailedPrecondition) {
    std::vector<IndexEntry> rows;  // mode none: the versions loaded at start-up
    for (const auto& e : c.core->repository()->entries()) {
      rows.push_back({e->name, e->version, e->state, e->error});
    }
    index = rows;
  }
  if (!index.ok()) return Reply(res, log, index.status());
  nlohmann::json out = nlohmann::json::array();
  for (const IndexEntry& row : *index) {
    if (ready_only && row.state != ModelState::kReady) continue;
    inference::RepositoryIndexResponse::ModelIndex model;
    oip::FillModelIndex(row, &model);
    out.push_back(ProtoToJson(model));
  }
  Reply(res, log, Status::Ok(), out);
}

void HandleRepositoryControl(const RestContext& c, const httplib::Request& req,
                             httplib::Response& res, bool load) {
  const char* rpc = load ? "RepositoryModelLoad" : "RepositoryModelUnload";
  const RequestLog log =
      BeginRequest(req, res, load ? "rest RepositoryModelLoad" : "rest RepositoryModelUnload");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  auto body = SmallBody(req);
  if (!body.ok()) return Reply(res, log, body.status());
  if (Status s = CheckParameters(*body, load ? nullptr : "unload_dependents"); !s.ok()) {
    return Reply(res, log, s);
  }
  if (c.options->controller == nullptr) return Reply(res, log, NoController(rpc));
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  const auto callback = [done](Status s) { done->set_value(std::move(s)); };
  const std::string model = req.matches[1].str();
  if (load) {
    c.options->controller->LoadModel(model, callback);
  } else {
    c.options->controller->UnloadModel(model, callback);
  }
  Reply(res, log, result.get(), nlohmann::json::object());
}

}  // namespace mha::serve::rest
