// Shared by the fuzz targets: one-time setup so that a run measures the parsers, not thread pools
// or log output.
#pragma once

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  at::set_num_threads(1);
  spdlog::set_level(spdlog::level::off);
  return 0;
}
