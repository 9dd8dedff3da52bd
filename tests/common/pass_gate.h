// The in-process hold gate: a test holds forward passes (a scheduler's pass_hook, or a fake
// forward function that calls Enter) instead of making them slow, waits until pass k has entered
// instead of sleeping "long enough", and lets passes go one by one or all at once. Its
// cross-process twin, with the same calls, is tests/service/hold_gate.h (mha-test-server's gate).
//
//   PassGate gate;
//   options.pass_hook = gate.Hook();          // or: the fake forward calls gate.Enter()
//   gate.Hold();                              // passes entered from now on wait at the gate
//   ... submit ...
//   ASSERT_TRUE(gate.WaitEntered(1));         // pass 1 is running (held)
//   gate.ReleaseAll();
//
// A failing test never hangs on it: every wait is bounded (WaitEntered fails the test after
// `timeout`; a pass held longer than `hold_limit` fails the test and goes through), and the
// destructor lets every held pass go and holds none after it. The hook shares the gate's state,
// so it stays safe to call after the gate is gone: declare the gate after the scheduler it holds
// (destroyed first, it releases the passes the scheduler's destructor would wait for), or put a
// ReleaseOnExit after the scheduler.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "mha/status.h"
#include "wait.h"

namespace mha::testing {

class PassGate {
 public:
  using Pass = std::function<Status()>;

  explicit PassGate(std::chrono::milliseconds hold_limit = 2 * kWaitTimeout)
      : state_(std::make_shared<State>()) {
    state_->hold_limit = hold_limit;
  }
  ~PassGate() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    state_->cv.notify_all();
  }
  PassGate(const PassGate&) = delete;
  PassGate& operator=(const PassGate&) = delete;

  // A pass hook (BatcherOptions / LayerStepSchedulerOptions::pass_hook): Enter, then the pass.
  std::function<Status(const Pass&)> Hook() const {
    return [state = state_](const Pass& pass) {
      state->Enter();
      return pass();
    };
  }
  // Counts a pass as entered and waits while the gate holds it (for fakes without a hook).
  void Enter() const { state_->Enter(); }

  // Passes entered from now on wait until released.
  void Hold() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->holding = !state_->closed;
  }
  // Lets pass `k` (1-based, in the order passes entered) through, held or not yet entered; the
  // others stay held.
  void Release(int64_t k) const {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->released.insert(k);
    state_->cv.notify_all();
  }
  // Lets every pass through, from now on (until the next Hold).
  void ReleaseAll() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->holding = false;
    state_->cv.notify_all();
  }
  // Waits until pass `k` has entered the gate (so it is held, if the gate holds).
  ::testing::AssertionResult WaitEntered(int64_t k,
                                         std::chrono::milliseconds timeout = kWaitTimeout) const {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (state_->cv.wait_for(lock, timeout, [&] { return state_->entered >= k; })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "pass " << k << " never reached the gate ("
           << std::chrono::duration_cast<std::chrono::seconds>(timeout).count() << " s; "
           << state_->entered << " entered)";
  }
  // Passes entered so far.
  int64_t entered() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->entered;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool holding = false, closed = false;
    int64_t entered = 0;
    std::set<int64_t> released;
    std::chrono::milliseconds hold_limit{0};

    void Enter() {
      std::unique_lock<std::mutex> lock(mu);
      const int64_t k = ++entered;
      cv.notify_all();
      const bool let_go = cv.wait_for(lock, hold_limit,
                                      [&] { return closed || !holding || released.count(k) > 0; });
      if (!let_go) {
        ADD_FAILURE() << "pass " << k << " was held for "
                      << std::chrono::duration_cast<std::chrono::seconds>(hold_limit).count()
                      << " s and never released (a test that failed, or forgot ReleaseAll); "
                         "letting it through";
      }
    }
  };

  std::shared_ptr<State> state_;
};

// Lets every pass of `gate` (a PassGate, or tests/service/hold_gate.h's HoldGate) through when it
// goes out of scope, also when an assertion ends the test early: declared after the scheduler,
// batcher or calls that wait for held passes, it runs before their destructors wait.
template <class Gate>
class ReleaseOnExit {
 public:
  explicit ReleaseOnExit(const Gate& gate) : gate_(gate) {}
  ~ReleaseOnExit() { gate_.ReleaseAll(); }
  ReleaseOnExit(const ReleaseOnExit&) = delete;
  ReleaseOnExit& operator=(const ReleaseOnExit&) = delete;

 private:
  const Gate& gate_;
};

}  // namespace mha::testing
