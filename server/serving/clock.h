// The serving layer's clock and the microsecond arithmetic it uses (no ATen, no gRPC).
#pragma once

#include <chrono>
#include <cstdint>

namespace mha::serve {

using Clock = std::chrono::steady_clock;

// Microseconds between two steady-clock points (0 if negative).
inline int64_t MicrosBetween(Clock::time_point from, Clock::time_point to) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
  return us > 0 ? us : 0;
}

}  // namespace mha::serve
