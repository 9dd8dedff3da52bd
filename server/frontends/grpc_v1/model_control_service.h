// mha.v1.ModelControlService on gRPC's callback API: LoadModel, UnloadModel, RepositoryIndex,
// translated to server/serving/model_controller.h. Optionally guarded by an admin token
// (admin_auth.h). Load and unload answer when done, from the core's
// lifecycle thread: no gRPC thread waits.
#pragma once

#include <string>

#include "mha/v1/attention.grpc.pb.h"
#include "server/serving/model_controller.h"

namespace mha::serve {

class ModelControlServiceImpl final : public v1::ModelControlService::CallbackService {
 public:
  // `controller` is not owned and must outlive the service. `admin_token` "" = no token needed.
  ModelControlServiceImpl(ModelController* controller, std::string admin_token);

  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* context,
                                      const v1::LoadModelRequest* request,
                                      v1::LoadModelResponse* response) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* context,
                                        const v1::UnloadModelRequest* request,
                                        v1::UnloadModelResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const v1::RepositoryIndexRequest* request,
                                            v1::RepositoryIndexResponse* response) override;

 private:
  ModelController* const controller_;
  const std::string admin_token_;
};

}  // namespace mha::serve
