// Model control as a front end sees it (Triton's model repository extension): load / reload,
// unload, and the index of the repository folder. ServerCore implements it; it is a separate
// interface so that front ends that only infer (and their fakes) need not know it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

enum class ModelControlMode { kNone, kPoll, kExplicit };
const char* ModelControlModeName(ModelControlMode mode);
StatusOr<ModelControlMode> ParseModelControlMode(const std::string& text);

// One row of RepositoryIndex: a version the server knows, or a model folder it has not loaded
// (version "", state unset, reason "not loaded").
struct IndexEntry {
  std::string name;
  std::string version;
  std::optional<ModelState> state;
  std::string reason;
};

class ModelController {
 public:
  using Callback = std::function<void(Status)>;
  virtual ~ModelController() = default;

  // Answers (on a lifecycle thread, or inline when refused) once the model is loaded or reloaded:
  // OK, or why a version failed (the versions that served before keep serving).
  virtual void LoadModel(const std::string& name, Callback done) = 0;
  // Answers once every accepted request of the model has been completed. NOT_FOUND when the model
  // is not loaded.
  virtual void UnloadModel(const std::string& name, Callback done) = 0;
  virtual StatusOr<std::vector<IndexEntry>> RepositoryIndex() const = 0;
};

}  // namespace mha::serve
