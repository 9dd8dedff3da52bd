// Private to mha_core: the threads the paged attention of a pass spreads over (PassThreads(),
// mha/runtime.h). Not ATen's intra-op pool: this build's ATen parallelizes with OpenMP, which the
// core's own loops are not compiled with, and the server keeps that pool at one thread for ATen's
// own ops. Helper threads start on first use and sleep on a condition variable between jobs (no
// spinning after a job, unlike OpenBLAS's or OpenMP's helpers).
#pragma once

#include <cstdint>
#include <functional>

namespace mha::internal {

// Runs task(0) .. task(tasks - 1), each exactly once, on up to `threads` threads, the caller's
// included; returns when all are done. Which thread runs which task is not fixed (a shared
// counter hands them out), so a task's result must not depend on it. One job at a time uses the
// helpers: a caller that finds them busy runs its tasks alone. An exception a task throws is
// rethrown here once every task has run or been skipped.
void RunTasks(int threads, int64_t tasks, const std::function<void(int64_t)>& task);

}  // namespace mha::internal
