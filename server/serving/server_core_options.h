// The serving core's options, their defaults in one place: mha-server's flags bind to these
// fields (server/app/config.cc), and every test that builds a ServerCore starts from them.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "server/serving/inference.h"
#include "server/serving/limits.h"
#include "server/serving/model_controller.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/scheduling/batcher_options.h"
#include "server/serving/sessions/kv_tier_options.h"
#include "server/serving/sessions/session_options.h"

namespace mha::serve {

struct ServerCoreOptions {
  std::string model_repository;  // "" = the built-in default model
  std::string default_model;
  LoadOverrides overrides;  // --dtype / --device over every config.json
  RequestLimits limits;
  bool batching = true;  // false: the same scheduler, one request per pass
  // Server-wide; config.json keys override them per model. batcher.instances: concurrent passes
  // per model, batching on or off (--instances). Its pass_hook (unset in mha-server) wraps every
  // forward pass of every model: the test server's hold gate.
  BatcherOptions batcher;
  int load_threads = 0;  // models loaded at once; 0 = min(cores, 4)
  ModelControlMode model_control = ModelControlMode::kNone;
  std::vector<std::string> startup_models;         // explicit mode: loaded at start (empty = all)
  std::chrono::milliseconds poll_interval{15000};  // poll mode: between repository scans
  SessionOptions sessions;  // decoding sessions: KV cache pool per model version, timeouts
  KvTierOptions kv_store;   // the shared KV tier (--kv-store); off by default
};

}  // namespace mha::serve
