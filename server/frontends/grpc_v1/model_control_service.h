// mha.v1.ModelControlService on gRPC's completion-queue API (the app's CqQueue, like every
// method): LoadModel, UnloadModel, RepositoryIndex, translated to
// server/serving/model_controller.h. Optionally guarded by an admin token (admin_auth.h). Load and
// unload answer when done, from the core's lifecycle thread: no queue thread waits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/grpc_call.h"
#include "server/serving/model_controller.h"

namespace mha::serve {

namespace internal {
using ModelControlBase = v1::ModelControlService::WithRawMethod_LoadModel<
    v1::ModelControlService::WithRawMethod_UnloadModel<
        v1::ModelControlService::WithRawMethod_RepositoryIndex<v1::ModelControlService::Service>>>;
}  // namespace internal

class ModelControlServiceImpl final : public internal::ModelControlBase {
 public:
  // `controller` is not owned and must outlive the service. `admin_token` "" = no token needed.
  // Served on `queue` (as AttentionServiceImpl's methods).
  ModelControlServiceImpl(ModelController* controller, CqQueue* queue, std::string admin_token);

  void HandleLoadModel(const UnaryCall& call, const v1::LoadModelRequest* request,
                       v1::LoadModelResponse* response);
  void HandleUnloadModel(const UnaryCall& call, const v1::UnloadModelRequest* request,
                         v1::UnloadModelResponse* response);
  void HandleRepositoryIndex(const UnaryCall& call, const v1::RepositoryIndexRequest* request,
                             v1::RepositoryIndexResponse* response);

 private:
  ModelController* const controller_;
  const std::string admin_token_;
  std::vector<std::unique_ptr<CqUnaryMethod>> unary_;
};

}  // namespace mha::serve
