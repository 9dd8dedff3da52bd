#include "server/frontends/common/repository_control.h"

#include <utility>

#include "mha/text.h"

namespace mha::serve {
namespace {

Status NoController(const char* rpc) {
  return FailedPrecondition(std::string(rpc) +
                            ": model control is off; start the server with "
                            "--model-control-mode explicit (or poll) to load and unload models");
}

}  // namespace

StatusOr<std::vector<IndexEntry>> RepositoryIndexRows(const ModelController* controller,
                                                      const ModelRepository& loaded,
                                                      bool ready_only) {
  StatusOr<std::vector<IndexEntry>> index = NoController("RepositoryIndex");
  if (controller != nullptr) index = controller->RepositoryIndex();
  if (!index.ok() && index.status().code() == StatusCode::kFailedPrecondition) {
    std::vector<IndexEntry> rows;  // mode none: the versions loaded at start-up
    for (const auto& e : loaded.entries())
      rows.push_back({e->name, e->version, e->state, e->error});
    index = std::move(rows);
  }
  if (!index.ok() || !ready_only) return index;
  std::vector<IndexEntry> ready;
  for (IndexEntry& row : *index) {
    if (row.state == ModelState::kReady) ready.push_back(std::move(row));
  }
  return ready;
}

Status CheckRepositoryParameters(const std::vector<std::string>& names, const char* accepted) {
  for (const std::string& name : names) {
    if (accepted != nullptr && name == accepted) continue;
    return InvalidArgument("parameters: '" + Abbreviate(name) +
                           "' is not supported (the server loads the model folder of the "
                           "repository as it is; no config or file overrides)");
  }
  return Status::Ok();
}

void ControlRepositoryModel(ModelController* controller, const char* rpc, bool load,
                            const Status& parameters, const std::string& model,
                            ModelController::Callback done) {
  if (!parameters.ok()) return done(parameters);
  if (controller == nullptr) return done(NoController(rpc));
  if (load) {
    controller->LoadModel(model, std::move(done));
  } else {
    controller->UnloadModel(model, std::move(done));
  }
}

}  // namespace mha::serve
