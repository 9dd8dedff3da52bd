// Process-wide LibTorch settings. With OpenBLAS (which threads its own GEMMs) ATen's intra-op
// pool is best left at 1: on a 2-core box 2 ATen threads on top cut MHA throughput from ~38 to
// ~15 forward passes/s. Make the choice explicit at start-up instead of inheriting a default.
#pragma once

#include <string>

#include "mha/status.h"

namespace mha {

struct ThreadingOptions {
  int intra_op_threads = 1;  // at::set_num_threads
  int inter_op_threads = 1;  // at::set_num_interop_threads (only before any inter-op work)
};

// FAILED_PRECONDITION when LibTorch cannot size its pools (its cpuinfo needs /proc/cpuinfo; a
// sandbox without /proc makes at::set_num_threads throw), with LibTorch's reason.
Status ConfigureThreads(const ThreadingOptions& options);

// "LibTorch 1.13.0, CPU, 1 intra-op thread(s), OpenMP/OpenBLAS ..." for start-up logs.
std::string RuntimeSummary();

}  // namespace mha
