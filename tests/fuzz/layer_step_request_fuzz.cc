// LayerStepRequest bytes -> the LayerSteps stream's path for one message (docs/afd.md):
// parse the protobuf, DecodeLayerStepRequest (session ids, tensor headers, byte counts, borrowed
// tensors), ServerCore::StepLayer (sessions, layers, shapes, the layer-order rule, limits) on a
// small Llama stack (tests/fixtures/llama/stack4_sessions: L=4, E=32) with four open sessions "f0"
// .. "f3", and for an answered message EncodeLayerStepResponse. Hidden states and output places
// may name the shared-memory region "fuzz" (fuzz_shm.h). Limits are small so that every
// accepted pass is cheap; nothing may crash, leak or trip a sanitizer.
#include <google/protobuf/stubs/logging.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <utility>

#include "fuzz_common.h"
#include "fuzz_shm.h"
#ifndef MHA_FIXTURES_DIR  // the normal build: tests/common/test_paths.h (MHA_FUZZ defines it)
#include "test_paths.h"
#endif
#include "mha/v1/attention.pb.h"
#include "server/frontends/grpc_v1/layer_step_wire.h"
#include "server/serving/server_core.h"

namespace {

mha::serve::ServerCore* LlamaCore() {
  static mha::serve::ServerCore* core = [] {
    google::protobuf::SetLogHandler(nullptr);
    char dir[] = "/tmp/mha-fuzz-llama-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    std::filesystem::create_directory_symlink(
        std::string(MHA_FIXTURES_DIR) + "/llama/stack4_sessions", std::string(dir) + "/llama");
    mha::serve::ServerCoreOptions options;
    options.model_repository = dir;
    options.limits.max_sequence_length = 64;
    options.limits.max_work_bytes = 32 << 20;
    options.sessions.pool.capacity_bytes = 4 << 20;
    options.sessions.pool.block_tokens = 4;
    auto created = mha::serve::ServerCore::Create(options);
    if (!created.ok()) std::abort();
    std::promise<void> loaded;
    created.value()->StartLoading([&loaded] { loaded.set_value(); });
    FuzzGet(loaded.get_future(), "the Llama stack's loading");
    for (int i = 0; i < 4; ++i) {
      mha::serve::OpenSessionRequest open;
      open.session_id = "f" + std::to_string(i);
      if (!created.value()->OpenSession(open).ok()) std::abort();
    }
    std::filesystem::remove_all(dir);  // loaded: the folder is no longer read
    return created.value().release();  // lives for the process (its threads too)
  }();
  return core;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mha::serve::ServerCore* core = LlamaCore();  // before parsing: it silences protobuf's log
  mha::v1::LayerStepRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  mha::serve::ShmPlan shm;
  auto decoded = mha::serve::DecodeLayerStepRequest(request, 4 << 20, /*borrow=*/true,
                                                    FuzzShmRegistry(), &shm);
  if (!decoded.ok()) return 0;
  std::promise<mha::serve::LayerStepResponse> answer;
  core->StepLayer(std::move(decoded.value()),
                  [&answer](mha::serve::LayerStepResponse r) { answer.set_value(std::move(r)); });
  const mha::serve::LayerStepResponse response =
      FuzzGet(answer.get_future(), "ServerCore::StepLayer's answer");
  mha::v1::LayerStepResponse out;
  if (!mha::serve::EncodeLayerStepResponse(request, response, &out, &shm).ok()) {
    mha::serve::EncodeLayerStepError(request, response.status, &out);
  }
  return 0;
}
