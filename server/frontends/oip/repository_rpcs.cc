// The model repository extension of the Open Inference Protocol (Triton's RepositoryIndex,
// RepositoryModelLoad, RepositoryModelUnload) on the model lifecycle
// (server/serving/model_controller.h): the same calls, modes and admin token as
// mha.v1.ModelControlService.
//   - RepositoryIndex: every model folder and every version the server knows (the lifecycle's
//     index); in --model-control-mode none, where the lifecycle has no index, the versions loaded
//     at start-up, as Triton still answers it. `ready` keeps the READY rows; repository_name is
//     not checked (one repository).
//   - RepositoryModelLoad / Unload: LoadModel / UnloadModel, answered when done. Triton's
//     override parameters ("config", "file:...") are refused: the server loads the repository
//     folder as it is; Unload's "unload_dependents" is accepted and has nothing to act on.
#include <string>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/oip/inference_service.h"

namespace mha::serve::oip {
namespace {

std::vector<IndexEntry> LoadedEntries(const ModelRepository& repository) {
  std::vector<IndexEntry> rows;
  for (const auto& entry : repository.entries()) {
    rows.push_back({entry->name, entry->version, entry->state, entry->error});
  }
  return rows;
}

template <typename Parameters>
Status CheckParameters(const Parameters& parameters, const char* accepted) {
  for (const auto& [name, value] : parameters) {
    if (accepted != nullptr && name == accepted) continue;
    return InvalidArgument("parameters: '" + Abbreviate(name) +
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

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return AdminUnary(context, "RepositoryIndex", options_.admin_token, [&] {
    StatusOr<std::vector<IndexEntry>> index = NoController("RepositoryIndex");
    if (options_.controller != nullptr) index = options_.controller->RepositoryIndex();
    if (!index.ok() && index.status().code() == StatusCode::kFailedPrecondition) {
      index = LoadedEntries(*core_->repository());  // mode none
    }
    for (const IndexEntry& row : index.ok() ? *index : std::vector<IndexEntry>()) {
      if (request->ready() && row.state != ModelState::kReady) continue;
      FillModelIndex(row, response->add_models());
    }
    return index.status();
  });
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* response) {
  return ControlModel(context, "RepositoryModelLoad", request->model_name(),
                      CheckParameters(request->parameters(), nullptr), &ModelController::LoadModel);
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* response) {
  return ControlModel(context, "RepositoryModelUnload", request->model_name(),
                      CheckParameters(request->parameters(), "unload_dependents"),
                      &ModelController::UnloadModel);
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ControlModel(
    grpc::CallbackServerContext* context, const char* rpc, const std::string& model,
    Status parameters, ControlAction action) {
  return AdminUnary(context, rpc, options_.admin_token, [&](const UnaryFinish& finish) {
    if (!parameters.ok()) return finish(parameters);
    if (options_.controller == nullptr) return finish(NoController(rpc));
    const std::string detail = "model=" + Abbreviate(model);
    (options_.controller->*action)(model, [finish, detail](Status done) { finish(done, detail); });
  });
}

}  // namespace mha::serve::oip
