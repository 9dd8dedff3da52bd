#include "server/serving/kinds/warmup.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "server/serving/clock.h"
#include "server/serving/kinds/model_kind.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

HostTensor WarmupRamp(int64_t batch, int64_t seq, int64_t dim) {
  const int64_t n = batch * seq * dim;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] =
        n > 1 ? static_cast<float>(-1.0 + 2.0 * static_cast<double>(i) / (n - 1)) : -1.0f;
  }
  return HostTensor::FromFloats({batch, seq, dim}, std::move(values));
}

void WarmUp(ModelEntry* entry, const BatcherOptions& scheduler) {
  if (entry->state != ModelState::kReady || !entry->servable) return;
  const bool given = entry->config.warmup_given;
  DefaultWarmupPasses passes;
  if (!given) passes = entry->servable->DefaultWarmup(scheduler);
  const std::vector<WarmupShape>& shapes = given ? entry->config.warmup : passes.shapes;
  if (shapes.empty()) return;
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const WarmupShape& shape = shapes[i];
    const Status status = entry->servable->WarmupPass(shape, given);
    if (status.ok()) {
      entry->warmup_passes = static_cast<int64_t>(i) + 1;
      continue;
    }
    const std::string what = "warmup[" + std::to_string(i) + "] (batch " +
                             std::to_string(shape.batch) + ", seq " + std::to_string(shape.seq) +
                             ") failed: " + status.ToString();
    if (!given) {
      spdlog::warn("model {} v{} default {}", entry->name, entry->version, what);
      return;
    }
    entry->state = ModelState::kFailed;
    entry->error = what;
    entry->servable.reset();
    return;
  }
  const std::string what = given ? "config.json" : passes.note.empty() ? "default" : passes.note;
  spdlog::info("model {} v{} warmup: {} passes in {:.1f} ms ({})", entry->name, entry->version,
               shapes.size(), MicrosBetween(start, Clock::now()) / 1000.0, what);
}

}  // namespace mha::serve
