// Shared by the fuzz targets of the wire front ends: one ServerCore for the process, serving the
// built-in default model (E=512, H=8) with small limits so that every accepted pass is cheap, and
// a blocking Infer.
#pragma once

#include <google/protobuf/stubs/logging.h>

#include <cstdlib>
#include <future>
#include <utility>

#include "fuzz_common.h"
#include "server/serving/server_core.h"

inline mha::serve::ServerCore* FuzzServerCore() {
  static mha::serve::ServerCore* core = [] {
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" lines for every such input
    mha::serve::ServerCoreOptions options;     // no repository: the built-in default model
    options.batching = false;                  // one pass per request
    options.limits.max_batch_size = 4;
    options.limits.max_sequence_length = 64;
    options.limits.max_response_bytes = 8 << 20;
    options.limits.max_work_bytes = 32 << 20;
    auto created = mha::serve::ServerCore::Create(options);
    if (!created.ok()) std::abort();
    std::promise<void> loaded;
    created.value()->StartLoading([&loaded] { loaded.set_value(); });
    FuzzGet(loaded.get_future(), "the default model's loading");
    return created.value().release();  // lives for the process (its threads too)
  }();
  return core;
}

// ServerCore::Infer, waiting for the answer.
inline mha::serve::InferenceResponse FuzzInfer(mha::serve::InferenceRequest request) {
  std::promise<mha::serve::InferenceResponse> answer;
  FuzzServerCore()->Infer(std::move(request), [&answer](mha::serve::InferenceResponse r) {
    answer.set_value(std::move(r));
  });
  return FuzzGet(answer.get_future(), "ServerCore::Infer's answer");
}
