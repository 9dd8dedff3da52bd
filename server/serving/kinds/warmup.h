// The warmup of a freshly loaded version, before it is READY, for every kind: config.json's
// "warmup" passes (a failed one makes the version FAILED), else its kind's default passes (a
// failed one is logged and the version stays READY: it was loadable, and the first request will
// say what is wrong).
#pragma once

#include <cstdint>

#include "mha/host_tensor.h"
#include "server/serving/scheduling/batcher_options.h"

namespace mha::serve {

struct ModelEntry;

// Runs `entry`'s warmup passes (config.json's, else entry->servable's default for `scheduler`,
// the options its scheduler will run with), counting them in entry->warmup_passes. Logs the
// passes and their milliseconds.
void WarmUp(ModelEntry* entry, const BatcherOptions& scheduler);

// [batch, seq, dim] float32 values evenly spaced over [-1, 1] (torch.linspace's): warmup inputs.
HostTensor WarmupRamp(int64_t batch, int64_t seq, int64_t dim);

}  // namespace mha::serve
