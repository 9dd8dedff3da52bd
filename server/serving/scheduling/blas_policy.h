// BlasPassPolicy: how many OpenBLAS threads a forward pass gets (docs/performance.md). OpenBLAS
// threads every GEMM over all cores by itself, and after each threaded GEMM its helper threads spin
// (sched_yield) for ~0.1 s before they sleep: under load they take a core from the gRPC threads
// and the other passes, so a request costs far more CPU than its math. Run at 1 thread a GEMM
// wakes no helper. The auto policy threads a pass only when it is the only work there is: no other
// pass running in the process and nothing waiting in its model's queue (one request at a time:
// the lowest latency); any other pass runs at 1 thread (under load: no spinning, and the other
// instances and the front end keep the cores busy). "The only work" = one request in the pass,
// nothing left in its queue, no other pass running: a pass that merged several requests is a sign
// of load even when it emptied the queue, and so the batcher calls a pass lone only when the pass
// before it was alone too (one request amid 32 clients' merged passes wakes no helper). OpenBLAS's
// setting is process-wide, so the count of running passes is too.
#pragma once

#include <atomic>

#include "mha/runtime.h"

namespace mha::serve {

struct BlasPolicyOptions {
  // 0 = auto (above); N > 0: every pass at N threads; -1: never touch OpenBLAS's setting.
  int threads = 0;
  int cores = 0;  // the threads a lone pass gets in auto mode; 0 = the machine's cores
};

class BlasPassPolicy {
 public:
  explicit BlasPassPolicy(BlasPolicyOptions options);

  // Marks one pass running for its lifetime and sets OpenBLAS's threads for it, and the threads of
  // its CPU attention (mha/runtime.h PassThreads) to the same count (1 when left alone): a pass
  // that is the only work runs its attention over every core, as its GEMMs.
  class Pass {
   public:
    // `lone_request`: the pass holds one request and its model's queue is empty.
    Pass(const BlasPassPolicy& policy, bool lone_request);
    ~Pass();
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    int threads() const { return threads_; }  // what this pass asked for (0: left alone)

   private:
    int threads_ = 0;
    ScopedPassThreads attention_;  // on this thread: the pass runs where it was made
  };

  // The threads a pass gets when `running` passes (itself included) run; 0 = leave OpenBLAS
  // alone. Pure: what the tests check.
  int ThreadsFor(int running, bool lone_request) const;

  // Passes running in this process (all models).
  static int Running();

 private:
  BlasPolicyOptions options_;
};

}  // namespace mha::serve
