// The model repository extension of the Open Inference Protocol (Triton's RepositoryIndex,
// RepositoryModelLoad, RepositoryModelUnload): the translation of the protocol-neutral answers of
// common/repository_control.h (modes, parameters, messages, shared with REST), with the same
// admin token as mha.v1.ModelControlService. RepositoryIndex's repository_name is not checked
// (one repository).
#include <string>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/common/repository_control.h"
#include "server/frontends/oip/inference_service.h"

namespace mha::serve::oip {
namespace {

template <typename Parameters>
std::vector<std::string> ParameterNames(const Parameters& parameters) {
  std::vector<std::string> names;
  for (const auto& [name, value] : parameters) names.push_back(name);
  return names;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return AdminUnary(context, "RepositoryIndex", options_.admin_token, [&] {
    auto index = RepositoryIndexRows(options_.controller, *core_->repository(), request->ready());
    for (const IndexEntry& row : index.ok() ? *index : std::vector<IndexEntry>()) {
      FillModelIndex(row, response->add_models());
    }
    return index.status();
  });
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* response) {
  return ControlModel(context, "RepositoryModelLoad", request->model_name(),
                      CheckRepositoryParameters(ParameterNames(request->parameters()), nullptr),
                      /*load=*/true);
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* response) {
  return ControlModel(
      context, "RepositoryModelUnload", request->model_name(),
      CheckRepositoryParameters(ParameterNames(request->parameters()), "unload_dependents"),
      /*load=*/false);
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ControlModel(
    grpc::CallbackServerContext* context, const char* rpc, const std::string& model,
    Status parameters, bool load) {
  return AdminUnary(context, rpc, options_.admin_token, [&](const UnaryFinish& finish) {
    const std::string detail = "model=" + Abbreviate(model);
    ControlRepositoryModel(options_.controller, rpc, load, parameters, model,
                           [finish, detail](Status done) { finish(done, detail); });
  });
}

}  // namespace mha::serve::oip
