// Triton's model repository extension (RepositoryIndex, RepositoryModelLoad,
// RepositoryModelUnload) as the OIP gRPC (oip/repository_rpcs.cc) and REST
// (rest/rest_repository.cc) front ends both answer it, on the model lifecycle
// (server/serving/model_controller.h); each front end only translates its wire form.
//   - Index: every model folder and version the lifecycle knows; in --model-control-mode none,
//     where the lifecycle has no index, the versions loaded at start-up (as Triton answers it).
//   - Load / Unload: LoadModel / UnloadModel, answered when done. Triton's override parameters
//     ("config", "file:...") are refused: the server loads the repository folder as it is;
//     Unload's "unload_dependents" is accepted and has nothing to act on.
#pragma once

#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/model_controller.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

// The index rows; `ready_only` keeps the READY ones. `controller` may be null (model control
// off: the versions of `loaded`, the repository served now).
StatusOr<std::vector<IndexEntry>> RepositoryIndexRows(const ModelController* controller,
                                                      const ModelRepository& loaded,
                                                      bool ready_only);

// The request's parameter names: OK when each is `accepted` (null: none is), else
// INVALID_ARGUMENT naming the first other one.
Status CheckRepositoryParameters(const std::vector<std::string>& names, const char* accepted);

// Load (`load`) or unload `model`: refused with `parameters` when that is an error, with
// FAILED_PRECONDITION naming `rpc` when `controller` is null; else the controller's answer.
// `done` is called once, inline when refused.
void ControlRepositoryModel(ModelController* controller, const char* rpc, bool load,
                            const Status& parameters, const std::string& model,
                            ModelController::Callback done);

}  // namespace mha::serve
