#include "server/serving/scheduling/blas_policy.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include "mha/runtime.h"

namespace mha::serve {
namespace {

std::atomic<int> g_running{0};
// What OpenBLAS was last set to by a pass (0: not yet): a pass whose count is already set takes
// no lock and makes no call; changes are made under g_set_mu.
std::mutex g_set_mu;
std::atomic<int> g_set{0};

// One more pass running: the threads it gets.
int Enter(const BlasPassPolicy& policy, bool lone_request) {
  return policy.ThreadsFor(g_running.fetch_add(1, std::memory_order_relaxed) + 1, lone_request);
}

}  // namespace

BlasPassPolicy::BlasPassPolicy(BlasPolicyOptions options) : options_(options) {
  if (options_.cores <= 0) {
    options_.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
}

int BlasPassPolicy::ThreadsFor(int running, bool lone_request) const {
  if (options_.threads < 0) return 0;
  if (options_.threads > 0) return options_.threads;
  return running <= 1 && lone_request ? options_.cores : 1;
}

int BlasPassPolicy::Running() { return g_running.load(std::memory_order_relaxed); }

BlasPassPolicy::Pass::Pass(const BlasPassPolicy& policy, bool lone_request)
    : threads_(Enter(policy, lone_request)), attention_(threads_) {
  if (threads_ <= 0 || g_set.load(std::memory_order_acquire) == threads_) return;
  std::lock_guard<std::mutex> lock(g_set_mu);
  if (g_set.load(std::memory_order_relaxed) != threads_ && SetBlasThreads(threads_)) {
    g_set.store(threads_, std::memory_order_release);
  }
}

BlasPassPolicy::Pass::~Pass() { g_running.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace mha::serve
