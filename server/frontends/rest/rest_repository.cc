// Triton's model repository extension over REST: the translation of the protocol-neutral answers
// of common/repository_control.h (modes, parameters check, messages; shared with gRPC's
// oip/repository_rpcs.cc), with the same admin token (`Authorization: Bearer <token>` header).
//   POST /v2/repository/index             {"ready": bool}? -> [{"name","version","state","reason"}]
//   POST /v2/repository/models/{m}/load   {"parameters": {}}? -> {} once loaded
//   POST /v2/repository/models/{m}/unload {"parameters": {"unload_dependents": bool}}? -> {}
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/frontends/common/admin_auth.h"
#include "server/frontends/common/repository_control.h"
#include "server/frontends/oip/model_metadata.h"
#include "server/frontends/rest/proto_json.h"
#include "server/frontends/rest/rest_handlers.h"

namespace mha::serve::rest {
Status Authorize(const RestContext& c, const httplib::Request& req) {
  if (!req.has_header("Authorization")) return AuthorizeAdmin(std::nullopt, c.options->admin_token);
  const std::string value = req.get_header_value("Authorization");
  return AuthorizeAdmin(value, c.options->admin_token);
}

StatusOr<nlohmann::json> SmallBody(const httplib::Request& req) {
  if (req.body.empty()) return nlohmann::json::object();
  if (req.body.size() > 65536) return InvalidArgument("request body: at most 65536 bytes here");
  nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
  if (!body.is_object()) return InvalidArgument("request body: must be a JSON object");
  return body;
}

namespace {

// The names in "parameters" (load takes none: the folder loads as it is; unload only
// unload_dependents).
StatusOr<std::vector<std::string>> ParameterNames(const nlohmann::json& body) {
  std::vector<std::string> names;
  const auto it = body.find("parameters");
  if (it == body.end()) return names;
  if (!it->is_object()) return InvalidArgument("parameters: must be an object");
  for (const auto& item : it->items()) names.push_back(item.key());
  return names;
}

}  // namespace

void HandleRepositoryIndex(const RestContext& c, const httplib::Request& req,
                           httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest RepositoryIndex");
  if (Status s = Authorize(c, req); !s.ok()) return Reply(res, log, s);
  auto body = SmallBody(req);
  if (!body.ok()) return Reply(res, log, body.status());
  auto index = RepositoryIndexRows(c.options->controller, *c.core->repository(),
                                   body->value("ready", false));
  if (!index.ok()) return Reply(res, log, index.status());
  nlohmann::json out = nlohmann::json::array();
  for (const IndexEntry& row : *index) {
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
  auto names = ParameterNames(*body);
  if (!names.ok()) return Reply(res, log, names.status());
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  ControlRepositoryModel(c.options->controller, rpc, load,
                         CheckRepositoryParameters(*names, load ? nullptr : "unload_dependents"),
                         req.matches[1].str(), [done](Status s) { done->set_value(std::move(s)); });
  Reply(res, log, result.get(), nlohmann::json::object());
}

}  // namespace mha::serve::rest
