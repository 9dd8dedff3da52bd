#include "frontends/grpc_v1/model_control_service.h"

#include <fstream>
#include <utility>

#include "frontends/grpc_v1/forward_request.h"
#include "frontends/grpc_v1/request_log.h"
#include "wire/status_convert.h"

namespace mha::serve {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";

// Compares in time independent of where the strings differ.
bool SameToken(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

void Finish(grpc::ServerUnaryReactor* reactor, const RequestLog& log, const Status& status,
            const std::string& detail) {
  LogOutcome(log, status, detail);
  reactor->Finish(codec::ToGrpcStatus(status));
}

std::string Trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

StatusOr<std::string> ReadAdminToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("--admin-token-file " + path + ": cannot open");
  std::string line;
  std::getline(in, line);
  line = Trim(line);
  if (line.empty()) return InvalidArgument("--admin-token-file " + path + ": the token is empty");
  return line;
}

ModelControlServiceImpl::ModelControlServiceImpl(ModelController* controller,
                                                 std::string admin_token)
    : controller_(controller), admin_token_(std::move(admin_token)) {}

Status ModelControlServiceImpl::Authorize(const grpc::CallbackServerContext& context) const {
  if (admin_token_.empty()) return Status::Ok();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorization);
  if (it == metadata.end()) {
    return Unauthenticated(
        "model control needs 'authorization: Bearer <token>' metadata (--admin-token-file is "
        "set)");
  }
  const std::string value(it->second.data(), it->second.size());
  if (value.rfind(kBearer, 0) != 0) {
    return Unauthenticated("authorization metadata must be 'Bearer <token>'");
  }
  if (!SameToken(value.substr(sizeof(kBearer) - 1), admin_token_)) {
    return PermissionDenied("the admin token does not match --admin-token-file");
  }
  return Status::Ok();
}

grpc::ServerUnaryReactor* ModelControlServiceImpl::LoadModel(grpc::CallbackServerContext* context,
                                                             const v1::LoadModelRequest* request,
                                                             v1::LoadModelResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "LoadModel");
  if (Status denied = Authorize(*context); !denied.ok()) {
    Finish(reactor, log, denied, "");
    return reactor;
  }
  const std::string detail = "model=" + request->name().substr(0, 128);
  controller_->LoadModel(request->name(), [reactor, log, detail](Status status) {
    Finish(reactor, log, status, detail);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ModelControlServiceImpl::UnloadModel(
    grpc::CallbackServerContext* context, const v1::UnloadModelRequest* request,
    v1::UnloadModelResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "UnloadModel");
  if (Status denied = Authorize(*context); !denied.ok()) {
    Finish(reactor, log, denied, "");
    return reactor;
  }
  const std::string detail = "model=" + request->name().substr(0, 128);
  controller_->UnloadModel(request->name(), [reactor, log, detail](Status status) {
    Finish(reactor, log, status, detail);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ModelControlServiceImpl::RepositoryIndex(
    grpc::CallbackServerContext* context, const v1::RepositoryIndexRequest* request,
    v1::RepositoryIndexResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "RepositoryIndex");
  Status status = Authorize(*context);
  if (status.ok()) {
    auto index = controller_->RepositoryIndex();
    status = index.status();
    for (const auto& e : index.ok() ? *index : std::vector<IndexEntry>()) {
      auto* row = response->add_models();
      row->set_name(e.name);
      row->set_version(e.version);
      if (e.state) row->set_state(ToProtoState(*e.state));
      row->set_reason(e.reason);
    }
  }
  Finish(reactor, log, status, "");
  return reactor;
}

}  // namespace mha::serve
