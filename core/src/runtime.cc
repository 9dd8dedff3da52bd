#include "mha/runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

namespace mha {

Status ConfigureThreads(const ThreadingOptions& options) {
  if (options.intra_op_threads > 0) {
    try {
      at::set_num_threads(options.intra_op_threads);
    } catch (const c10::Error& e) {
      return FailedPrecondition("LibTorch could not set " +
                                std::to_string(options.intra_op_threads) +
                                " intra-op thread(s): " + e.what_without_backtrace());
    }
  }
  if (options.inter_op_threads > 0) {
    try {
      at::set_num_interop_threads(options.inter_op_threads);
    } catch (const c10::Error&) {
      // Only settable once, before the inter-op pool starts; keep what is there.
      spdlog::debug("inter-op threads already fixed at {}", at::get_num_interop_threads());
    }
  }
  return Status::Ok();
}

std::string RuntimeSummary() {
  return std::string("LibTorch ") + TORCH_VERSION + ", " +
         (at::hasCUDA() ? "CUDA available" : "no CUDA") + ", " +
         std::to_string(at::get_num_threads()) + " intra-op thread(s), " +
         std::to_string(at::get_num_interop_threads()) + " inter-op thread(s)";
}

}  // namespace mha
