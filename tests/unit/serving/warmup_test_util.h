// The default warmup's pass count as the server plans it for a READY version, for tests that
// check it ran in full: on the CPU two passes ([1, 16], then [2, 8] with weights); on a device
// the merge's shapes and graph buckets come first (kinds/multihead/warmup_plan.h), so there it
// depends on the scheduler the version runs with.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "server/serving/kinds/model_kind.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/server_core_options.h"

namespace mha::testing {

inline int64_t PlannedDefaultWarmupPasses(const serve::ModelEntry& entry,
                                          const serve::ServerCoreOptions& options) {
  if (!entry.servable) {
    ADD_FAILURE() << entry.name << ": no servable (not READY)";
    return -1;
  }
  const serve::BatcherOptions scheduler =
      serve::SchedulerOptionsFor(entry.config, options.batching, options.batcher);
  const auto planned = static_cast<int64_t>(entry.servable->DefaultWarmup(scheduler).shapes.size());
  if (entry.info.device == "cpu") {
    EXPECT_EQ(planned, 2) << entry.name;
  } else {
    EXPECT_GT(planned, 2) << entry.name << " on " << entry.info.device;
  }
  return planned;
}

}  // namespace mha::testing
