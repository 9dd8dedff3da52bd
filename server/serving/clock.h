// The serving layer's clock and the microsecond arithmetic it uses (no ATen, no gRPC).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace mha::serve {

using Clock = std::chrono::steady_clock;

// Where a component reads the time (TF Serving's EnvTime / FakeClockEnv idea): the real steady
// clock in the server, a FakeClock in tests, so that time-driven behaviour (idle expiry, the
// batcher's queue delay and deadlines) is tested by advancing time, not by sleeping.
class ClockSource {
 public:
  virtual ~ClockSource() = default;
  virtual Clock::time_point Now() const = 0;
  // When (on the steady clock, for condition_variable::wait_until) a thread that waits until `at`
  // (a time of this clock) should wake to look again: `at` itself for the real clock.
  virtual Clock::time_point WakeAt(Clock::time_point at) const { return at; }
};

// A clock that moves only when told to. Thread-safe. Advance notifies nobody: a thread waiting
// for one of its times wakes every kTick of real time (WakeAt) and reads Now() again, so only
// code under test with a FakeClock polls, and Advance needs no registry of waiters.
class FakeClock final : public ClockSource {
 public:
  static constexpr std::chrono::milliseconds kTick{1};
  Clock::time_point Now() const override { return Clock::time_point(Clock::duration(ns_.load())); }
  Clock::time_point WakeAt(Clock::time_point) const override { return Clock::now() + kTick; }
  void Advance(Clock::duration by) { ns_.fetch_add(by.count()); }

 private:
  std::atomic<Clock::rep> ns_{Clock::now().time_since_epoch().count()};
};

// Microseconds between two steady-clock points (0 if negative).
inline int64_t MicrosBetween(Clock::time_point from, Clock::time_point to) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
  return us > 0 ? us : 0;
}

inline const ClockSource& RealClock() {
  class Steady final : public ClockSource {
   public:
    Clock::time_point Now() const override { return Clock::now(); }
  };
  static const Steady clock;
  return clock;
}

}  // namespace mha::serve
