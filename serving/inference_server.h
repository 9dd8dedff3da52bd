// What a front end needs of the serving core: Infer, the models, and counting what it refused
// itself. ServerCore implements it; front-end tests use a fake.
#pragma once

#include <memory>
#include <string>

#include "serving/inference.h"
#include "serving/repository/model_repository.h"

namespace mha::serve {

class InferenceServer {
 public:
  virtual ~InferenceServer() = default;

  // Validates once and runs `request`; `done` is called exactly once (see InferDone).
  virtual void Infer(InferenceRequest request, InferDone done) = 0;
  // A request the front end refused before Infer, counted like the others. `model` as requested.
  virtual void RecordRefused(const std::string& model, const Status& status,
                             Clock::time_point start) = 0;
  // The models as they are now; never null.
  virtual std::shared_ptr<const ModelRepository> repository() const = 0;
};

}  // namespace mha::serve
