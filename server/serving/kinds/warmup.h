// The warmup of a freshly loaded version, before it is READY, for every kind: config.json's
// "warmup" passes (a failed one makes the version FAILED), else its kind's default passes (a
// failed one is logged and the version stays READY: it was loadable, and the first request will
// say what is wrong).
#pragma once

#include <cstdint>

#include "mha/host_tensor.h"

namespace mha::serve {

struct ModelEntry;

// Runs `entry`'s warmup passes (entry->servable's), counting them in entry->warmup_passes.
void WarmUp(ModelEntry* entry);

// [batch, seq, dim] float32 values evenly spaced over [-1, 1] (torch.linspace's): warmup inputs.
HostTensor WarmupRamp(int64_t batch, int64_t seq, int64_t dim);

}  // namespace mha::serve
