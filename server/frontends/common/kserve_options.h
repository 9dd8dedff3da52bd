// What both KServe v2 front ends (the Open Inference Protocol over gRPC, and REST) take from the
// app, once: their option structs extend it (oip/inference_service.h, rest/rest_server.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "server/frontends/shm/shared_memory_registry.h"
#include "server/serving/model_controller.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve {

struct KServeOptions {
  // A request above it: RESOURCE_EXHAUSTED (gRPC), 413 (REST).
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // ServerReady / /v2/health/ready; empty = no model is LOADING and one is READY
  // (ModelRepository::Ready). The app passes its health state.
  std::function<bool()> server_ready;
  std::string server_version;  // ServerMetadata.version ("" = the build's version)
  // The repository extension's load / unload / index (not owned); null = FAILED_PRECONDITION
  // (REST: 400). With an admin token they need it (admin_auth.h).
  ModelController* controller = nullptr;
  std::string admin_token;  // "" = the repository calls need no token
  // Triton's shared-memory extension (not owned; shared by both front ends); null = tensors that
  // name a region and the registration calls are refused. With an admin token, registration
  // needs it.
  SharedMemoryRegistry* shm = nullptr;
};

}  // namespace mha::serve
