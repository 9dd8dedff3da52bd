// One decoding-session step of a one-layer model (InferenceTask::step): the session's cache, which
// the step extends (the step's inputs are the task's: the new tokens' query, masks, weights flags)
// with the version's model. `owner` keeps the cache alive until the step is answered, also when
// the session is closed or evicted meanwhile. The sessions admit one step per session at a time
// (the gate), so no two tasks in flight share a cache.
#pragma once

#include <memory>

#include "mha/engine.h"
#include "server/serving/scheduling/runner.h"

namespace mha::serve {

struct SessionStep {
  std::shared_ptr<const MhaModel> model;
  std::shared_ptr<void> owner;
  KvCache* cache = nullptr;
  bool cross = false;
};

}  // namespace mha::serve
