// Waiting in tests without hanging and without timing: every wait has a bound, and the bound is
// a failure guard (a test that reaches it has failed: the thing never happened), never a speed
// assumption. Nothing here asserts on elapsed time. Torch-free, header-only: every tier uses it.
//
//   ASSERT_TRUE(WaitUntil([&] { return server.log().find("ready") != npos; }, "ready logged"));
//   const Answer a = GetWithin(future);     // throws WaitTimeout (the test fails) after 60 s
//
// Prefer waiting on an event (a condition variable, a hold gate's WaitEntered) where the code
// under test offers one; WaitUntil polls for what only shows from outside (a file, a metric, a
// log line, another process).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace mha::testing {

// The default bound of every wait: generous, so that only a thing that never happens reaches it
// (a loaded 2-core machine under a sanitizer makes tests slower, not failed).
inline constexpr std::chrono::seconds kWaitTimeout{60};

// Polls `condition` (a callable returning something convertible to bool) every `poll` until it
// holds: AssertionSuccess, or AssertionFailure naming `what` and the bound once `timeout` has
// passed. Use as ASSERT_TRUE(WaitUntil(...)) or `if (!WaitUntil(...))`; `condition` is always
// evaluated once more after the bound, so a condition that became true just then still passes.
template <typename Condition>
::testing::AssertionResult WaitUntil(
    Condition&& condition, const std::string& what,
    std::chrono::milliseconds timeout = kWaitTimeout,
    std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const bool past = std::chrono::steady_clock::now() > give_up;
    if (condition()) return ::testing::AssertionSuccess();
    if (past) {
      return ::testing::AssertionFailure()
             << "waited " << std::chrono::duration_cast<std::chrono::seconds>(timeout).count()
             << " s for " << what << ": it never happened";
    }
    std::this_thread::sleep_for(poll);
  }
}

// What GetWithin throws when the future is not ready in time: GoogleTest reports it as a
// failure of the test ("C++ exception with description ... thrown in the test body") and the
// test ends there, its fixture torn down, instead of waiting for ctest's timeout.
class WaitTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// future.get(), but at most `timeout` of waiting (std::future or std::shared_future, any value
// type, void included); WaitTimeout naming `what` when it is not ready by then.
template <typename Future>
decltype(auto) GetWithin(Future&& future, const std::string& what = "the answer",
                         std::chrono::milliseconds timeout = kWaitTimeout) {
  if (!future.valid()) throw WaitTimeout(what + ": the future has no shared state");
  if (future.wait_for(timeout) == std::future_status::timeout) {
    throw WaitTimeout(
        "waited " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
        " s for " + what + ": it never came");
  }
  return std::forward<Future>(future).get();
}

}  // namespace mha::testing
