// The passes a scheduler runs, torch-free from the outside: one request alone, several requests
// merged into one pass, several sessions' steps in one pass. The implementation (pass_runner.cc,
// with batch_merge.cc the serving layer's merge/split) turns the tasks' host tensors into ATen
// tensors through the core's adapter, merges, runs the pass, slices, and writes every answer on
// the host in its task's output types. A DynamicBatcher owns one; tests give it a fake forward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mha/engine.h"
#include "mha/host_io.h"
#include "mha/status.h"
#include "server/serving/clock.h"
#include "server/serving/kinds/multihead/batch_assembly.h"
#include "server/serving/scheduling/runner.h"

namespace mha {
struct ForwardInputs;  // mha/forward_io.h (LibTorch)
struct ForwardOutputs;
}  // namespace mha

namespace mha::serve {

// A forward pass over validated (or merged) inputs: MhaModel::ForwardValidated, or a test's fake.
using BatchForwardFn = std::function<Status(const ForwardInputs&, ForwardOutputs*)>;

// The parts of a merged pass's compute time: merging the inputs, slicing the outputs.
struct PassTimes {
  int64_t merge_us = 0, split_us = 0;
};

class PassRunner {
 public:
  virtual ~PassRunner() = default;
  // One task's pass (a session step: DecodeStep on its cache).
  virtual Status RunOne(const InferenceTask& task, HostOutputs* out) const = 0;
  // Tasks of one GroupKey (at least two) as one merged pass, answers in order; `clock` times the
  // merge and the split. On failure (of one request or the merge) the batcher runs each alone.
  virtual Status RunMerged(const std::vector<const InferenceTask*>& tasks,
                           std::vector<HostOutputs>* outs, const ClockSource& clock,
                           PassTimes* times) const = 0;
  // Session steps of distinct sessions as one pass (DecodeSteps): on failure every cache is back
  // at its length, so each step can run alone.
  virtual Status RunSteps(const std::vector<const InferenceTask*>& tasks,
                          std::vector<HostOutputs>* outs) const = 0;
};

// Stateless passes through `forward` (session steps through their task's model).
std::unique_ptr<PassRunner> MakePassRunner(BatchModelInfo info, BatchForwardFn forward);
// MakePassRunner over `model`'s ForwardValidated (tasks were validated by ServerCore and merged
// batches are valid by construction).
std::unique_ptr<PassRunner> MakeModelPassRunner(std::shared_ptr<const MhaModel> model);

}  // namespace mha::serve
