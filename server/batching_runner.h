// BatchingRunner: the ModelRunner the server uses when --batching is on. One DynamicBatcher per
// model (its own queue, workers and settings), picked by the task's model; the handlers see the
// same interface as with DirectRunner.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dynamic_batcher.h"
#include "mha/status.h"

namespace mha::serve {

// Batching settings of one model: the keys max_batch_size (rows per pass), max_batch_tokens,
// max_queue_delay_us, max_queue_size and instances of the model folder's config.json, over
// `defaults` (the server flags). A missing file or key keeps the default; a key of the wrong
// type or range is INVALID_ARGUMENT naming the file and the key.
StatusOr<BatcherOptions> ReadBatcherConfig(const std::string& config_json_path,
                                           const BatcherOptions& defaults);

class BatchingRunner final : public ModelRunner {
 public:
  // `metrics` may be null.
  BatchingRunner(BatcherOptions defaults, Metrics* metrics);
  ~BatchingRunner() override;

  // Starts the batcher of a loaded model with its own settings. A model that gets a task without
  // having been added gets a batcher with the defaults.
  void AddModel(const std::string& name, std::shared_ptr<const MhaModel> model,
                const BatcherOptions& options);

  void Submit(InferenceTask task, DoneCallback done) override;
  void Shutdown() override;
  size_t queue_depth() const override;

 private:
  const BatcherOptions defaults_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  bool stopping_ = false;
  // Never removed before the destructor, so Submit may use a batcher after unlocking.
  std::map<const MhaModel*, std::unique_ptr<DynamicBatcher>> batchers_;
};

}  // namespace mha::serve
