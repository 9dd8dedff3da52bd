#include "server/frontends/grpc_v1/model_control_service.h"

#include <utility>

#include "proto/wire/status_convert.h"
#include "server/frontends/grpc_v1/admin_auth.h"
#include "server/frontends/grpc_v1/forward_request.h"
#include "server/frontends/grpc_v1/request_log.h"
#include "server/frontends/raw_call.h"

namespace mha::serve {
ModelControlServiceImpl::ModelControlServiceImpl(ModelController* controller,
                                                 std::string admin_token)
    : controller_(controller), admin_token_(std::move(admin_token)) {}

grpc::ServerUnaryReactor* ModelControlServiceImpl::LoadModel(grpc::CallbackServerContext* context,
                                                             const v1::LoadModelRequest* request,
                                                             v1::LoadModelResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "LoadModel");
  if (Status denied = AuthorizeAdmin(*context, admin_token_); !denied.ok()) {
    FinishCall(reactor, log, denied, "");
    return reactor;
  }
  const std::string detail = "model=" + request->name().substr(0, 128);
  controller_->LoadModel(request->name(), [reactor, log, detail](Status status) {
    FinishCall(reactor, log, status, detail);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ModelControlServiceImpl::UnloadModel(
    grpc::CallbackServerContext* context, const v1::UnloadModelRequest* request,
    v1::UnloadModelResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "UnloadModel");
  if (Status denied = AuthorizeAdmin(*context, admin_token_); !denied.ok()) {
    FinishCall(reactor, log, denied, "");
    return reactor;
  }
  const std::string detail = "model=" + request->name().substr(0, 128);
  controller_->UnloadModel(request->name(), [reactor, log, detail](Status status) {
    FinishCall(reactor, log, status, detail);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ModelControlServiceImpl::RepositoryIndex(
    grpc::CallbackServerContext* context, const v1::RepositoryIndexRequest* request,
    v1::RepositoryIndexResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "RepositoryIndex");
  Status status = AuthorizeAdmin(*context, admin_token_);
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
  FinishCall(reactor, log, status, "");
  return reactor;
}

}  // namespace mha::serve
