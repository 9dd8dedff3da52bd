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

void GrpcInferenceServiceImpl::HandleRepositoryIndex(
    const UnaryCall& call, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return AdminUnary(call, "RepositoryIndex", options_.admin_token, [&] {
    auto index = RepositoryIndexRows(options_.controller, *core_->repository(), request->ready());
    for (const IndexEntry& row : index.ok() ? *index : std::vector<IndexEntry>()) {
      FillModelIndex(row, response->add_models());
    }
    return index.status();
  });
}

void GrpcInferenceServiceImpl::HandleRepositoryModelLoad(
    const UnaryCall& call, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* response) {
  return ControlModel(call, "RepositoryModelLoad", request->model_name(),
                      CheckRepositoryParameters(ParameterNames(request->parameters()), nullptr),
                      /*load=*/true);
}

void GrpcInferenceServiceImpl::HandleRepositoryModelUnload(
    const UnaryCall& call, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* response) {
  return ControlModel(
      call, "RepositoryModelUnload", request->model_name(),
      CheckRepositoryParameters(ParameterNames(request->parameters()), "unload_dependents"),
      /*load=*/false);
}

void GrpcInferenceServiceImpl::ControlModel(const UnaryCall& call, const char* rpc,
                                            const std::string& model, Status parameters,
                                            bool load) {
  return AdminUnary(call, rpc, options_.admin_token, [&](const UnaryFinish& finish) {
    const std::string detail = "model=" + Abbreviate(model);
    ControlRepositoryModel(options_.controller, rpc, load, parameters, model,
                           [finish, detail](Status done) { finish(done, detail); });
  });
}

}  // namespace mha::serve::oip
