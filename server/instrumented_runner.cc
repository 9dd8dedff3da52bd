#include "instrumented_runner.h"

#include <utility>

#include "batch_assembly.h"
#include "metrics.h"

namespace mha::serve {

InstrumentedRunner::InstrumentedRunner(ModelRunner* inner, Metrics* metrics, bool records_batches)
    : inner_(inner), metrics_(metrics), records_batches_(records_batches) {}

void InstrumentedRunner::Submit(InferenceTask task, DoneCallback done) {
  const std::string model = task.model_name;
  TokenCount tokens;
  int64_t rows = 0;
  if (!records_batches_ && MergeableShape(task.inputs)) {
    const RequestShape shape = ShapeOf(task.inputs);
    rows = shape.rows;
    tokens = CountTokens({shape}, task.inputs.key.defined());
  }
  metrics_->AddInflight(model, 1);
  auto wrapped = [this, model, rows, tokens, done = std::move(done)](InferenceResult result) {
    const bool refused = result.status.code() == StatusCode::kResourceExhausted ||
                         result.status.code() == StatusCode::kUnavailable;
    const bool computed = result.status.ok() || result.compute_us > 0;
    if (!refused || computed) metrics_->RecordQueue(model, result.queue_us * 1e-6);
    if (computed) metrics_->RecordCompute(model, result.compute_us * 1e-6);
    if (!records_batches_) {
      if (result.status.ok() && rows > 0) {
        metrics_->RecordBatch(model, 1, rows, tokens.real, tokens.padded);
      }
      metrics_->SetQueueDepth(model, static_cast<int64_t>(inner_->queue_depth()));
    }
    metrics_->AddInflight(model, -1);
    done(std::move(result));
  };
  inner_->Submit(std::move(task), std::move(wrapped));
  if (!records_batches_) {
    metrics_->SetQueueDepth(model, static_cast<int64_t>(inner_->queue_depth()));
  }
}

}  // namespace mha::serve
