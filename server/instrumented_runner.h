// InstrumentedRunner: wraps the server's ModelRunner (DirectRunner or BatchingRunner) and records
// per-request metrics on the way through: mha_inflight_requests, mha_queue_duration_seconds and
// mha_compute_duration_seconds from the InferenceResult timings. For a runner that does not
// batch itself (`records_batches` false) it also records each forward pass as a batch of one and
// the runner's queue depth, so that the batch and padding series exist with batching off too.
#pragma once

#include "runner.h"

namespace mha::serve {

class Metrics;

class InstrumentedRunner final : public ModelRunner {
 public:
  // Neither is owned; both must outlive this object.
  InstrumentedRunner(ModelRunner* inner, Metrics* metrics, bool records_batches);

  void Submit(InferenceTask task, DoneCallback done) override;
  void Shutdown() override { inner_->Shutdown(); }
  size_t queue_depth() const override { return inner_->queue_depth(); }

 private:
  ModelRunner* const inner_;
  Metrics* const metrics_;
  const bool records_batches_;
};

}  // namespace mha::serve
