// The batched step of a Llama-family stack's sessions (StepSessions). A session's caches, one per
// layer (LlamaSessionCache), are in the torch-free mha/llama_session_cache.h.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/llama_session_cache.h"
#include "mha/llama_stack.h"
#include "mha/llama_step.h"
#include "mha/status.h"

namespace mha {

// One entry of a layer step over sessions: a session, its hidden states [t, E] at the step's
// layer, where its output [t, E] goes.
struct LlamaSessionStep {
  LlamaSessionCache* session = nullptr;
  at::Tensor hidden;
  at::Tensor* output = nullptr;
};

// The step as the serving layer runs it: every entry checked (CheckLlamaStep's rules, sessions
// of the stack's layer count, no session twice) and prepared (LlamaSessionCache::Prepare), then
// one LlamaLayerStep. The first refusal is returned, prefixed with "entry i: ", and no entry is
// stepped (blocks already reserved for earlier entries stay with their sessions, for their next
// step).
Status StepSessions(const LlamaAttentionStack& stack, int64_t layer,
                    const std::vector<LlamaSessionStep>& entries,
                    StepAttention attention = StepAttention::kPerSession);

}  // namespace mha
