#include "server/frontends/grpc_v1/model_control_service.h"

#include <utility>
#include <vector>

#include "server/frontends/common/grpc_call.h"
#include "server/frontends/grpc_v1/forward_request.h"

namespace mha::serve {
ModelControlServiceImpl::ModelControlServiceImpl(ModelController* controller, CqQueue* queue,
                                                 std::string admin_token)
    : controller_(controller), admin_token_(std::move(admin_token)) {
  using S = ModelControlServiceImpl;
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestLoadModel, "LoadModel", &S::HandleLoadModel));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestUnloadModel, "UnloadModel", &S::HandleUnloadModel));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestRepositoryIndex, "RepositoryIndex",
                                   &S::HandleRepositoryIndex));
}

void ModelControlServiceImpl::HandleLoadModel(const UnaryCall& call,
                                              const v1::LoadModelRequest* request,
                                              v1::LoadModelResponse* response) {
  return AdminUnary(call, "LoadModel", admin_token_, [&](const UnaryFinish& finish) {
    const std::string detail = "model=" + request->name().substr(0, 128);
    controller_->LoadModel(request->name(),
                           [finish, detail](Status status) { finish(status, detail); });
  });
}

void ModelControlServiceImpl::HandleUnloadModel(const UnaryCall& call,
                                                const v1::UnloadModelRequest* request,
                                                v1::UnloadModelResponse* response) {
  return AdminUnary(call, "UnloadModel", admin_token_, [&](const UnaryFinish& finish) {
    const std::string detail = "model=" + request->name().substr(0, 128);
    controller_->UnloadModel(request->name(),
                             [finish, detail](Status status) { finish(status, detail); });
  });
}

void ModelControlServiceImpl::HandleRepositoryIndex(const UnaryCall& call,
                                                    const v1::RepositoryIndexRequest* request,
                                                    v1::RepositoryIndexResponse* response) {
  return AdminUnary(call, "RepositoryIndex", admin_token_, [&] {
    auto index = controller_->RepositoryIndex();
    for (const auto& e : index.ok() ? *index : std::vector<IndexEntry>()) {
      auto* row = response->add_models();
      row->set_name(e.name);
      row->set_version(e.version);
      if (e.state) row->set_state(ToProtoState(*e.state));
      row->set_reason(e.reason);
    }
    return index.status();
  });
}

}  // namespace mha::serve
