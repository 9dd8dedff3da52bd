// Shared by the Llama serving suites (llama_sessions_test.cc, layer_step_scheduler_test.cc,
// server_core_llama_test.cc): the fixture stacks through the core's torch-free API, the fixture
// sessions' rows as host tensors, and the in-process hold gate (tests/common/pass_gate.h).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "llama_test_util.h"
#include "mha/llama_engine.h"
#include "mha/tensor_adapter.h"
#include "pass_gate.h"
#include "server/serving/kinds/llama/llama_sessions.h"
#include "test_util.h"

namespace mha::testing {

inline LoadedLlamaModel LoadFixtureModel(const std::string& name) {
  LlamaLoadOptions options;
  options.path = FixturePath("llama/" + name);
  options.device = "cpu";
  auto loaded = LoadLlamaModel(options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? loaded.value() : LoadedLlamaModel();
}

// Rows [begin, begin + n) of a [T, E] tensor as a host tensor.
inline HostTensor Rows(const at::Tensor& t, int64_t begin, int64_t n) {
  return ToHost(t.narrow(0, begin, n).contiguous());
}

inline serve::SessionOptions SmallPool(int64_t bytes, int64_t block_tokens) {
  serve::SessionOptions o;
  o.pool.capacity_bytes = bytes;
  o.pool.block_tokens = block_tokens;
  return o;
}

// A session of `max_tokens` tokens under `id` ("" = a new one).
inline StatusOr<serve::SessionInfo> OpenLlama(serve::LlamaSessions& store, int64_t max_tokens,
                                              const std::string& id) {
  serve::OpenSessionRequest r;
  r.max_tokens = max_tokens;
  r.session_id = id;
  serve::CallerThread caller;
  return store.Open(r, caller);
}

// The caller of a session call in these tests: a thread that may block freely.
inline serve::CallerThread& Worker() {
  static thread_local serve::CallerThread worker;
  return worker;
}

}  // namespace mha::testing
