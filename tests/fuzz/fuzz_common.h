// Shared by the fuzz targets: one-time setup so that a run measures the parsers, not thread pools
// or log output; and FuzzGet, the targets' only way to wait for a future.
#pragma once

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  at::set_num_threads(1);
  spdlog::set_level(spdlog::level::off);
  return 0;
}

// future.get(), but at most kFuzzWaitTimeout of waiting: past it the target aborts with a message
// naming `what` (a hang is a finding, reported as one, never a run stuck until an outer timeout).
// Generous: every accepted input is a small pass, so only a thing that never comes reaches it.
inline constexpr std::chrono::seconds kFuzzWaitTimeout{60};

template <typename T>
T FuzzGet(std::future<T> future, const char* what) {
  if (future.wait_for(kFuzzWaitTimeout) != std::future_status::ready) {
    std::fprintf(stderr, "fuzz: waited %lld s for %s: it never came (a hang)\n",
                 static_cast<long long>(kFuzzWaitTimeout.count()), what);
    std::abort();
  }
  return future.get();
}
