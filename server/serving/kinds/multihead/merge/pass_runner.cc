#include "server/serving/kinds/multihead/merge/pass_runner.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <exception>
#include <string>
#include <utility>

#include "mha/decode.h"
#include "mha/kv_cache.h"
#include "mha/model.h"
#include "mha/tensor_adapter.h"
#include "server/serving/kinds/multihead/merge/batch_merge.h"
#include "server/serving/kinds/multihead/merge/host_merge.h"
#include "server/serving/kinds/multihead/session_step.h"

namespace mha::serve {
namespace {

// Runs `fn` under InferenceMode; LibTorch's errors (wrapping, merging, copying) -> INTERNAL.
template <typename Fn>
Status Guarded(const char* what, Fn&& fn) {
  try {
    c10::InferenceMode inference;  // no autograd bookkeeping for merges, slices and copies
    return fn();
  } catch (const c10::Error& e) {
    return Internal(std::string(what) + " failed: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string(what) + " failed: " + e.what());
  }
}

// Runs a pass of session steps: when it fails at any point (also after DecodeSteps succeeded,
// while answers are copied out) every cache goes back to its length before the pass, so that each
// step can run again alone.
template <typename Fn>
Status StepPass(const std::vector<const InferenceTask*>& tasks, Fn&& fn) {
  std::vector<int64_t> lengths;
  for (const InferenceTask* t : tasks) lengths.push_back(t->step->cache->length());
  const Status status = Guarded("the session steps", std::forward<Fn>(fn));
  if (!status.ok()) {
    for (size_t i = 0; i < tasks.size(); ++i) tasks[i]->step->cache->Truncate(lengths[i]);
  }
  return status;
}

class ForwardPassRunner : public PassRunner {
 public:
  ForwardPassRunner(BatchModelInfo info, BatchForwardFn forward)
      : info_(info), forward_(std::move(forward)) {}

  Status RunOne(const InferenceTask& task, HostOutputs* out) const override {
    if (task.step) {
      return StepPass({&task}, [&] {
        const SessionStep& s = *task.step;
        ForwardOutputs outputs;
        MHA_RETURN_IF_ERROR(
            DecodeStep(*s.model, s.cache, s.cross, ToStepInputs(task.inputs), &outputs));
        *out = ToHostOutputs(outputs, task.output_types);
        return Status::Ok();
      });
    }
    return Guarded("the forward pass", [&] {
      ForwardOutputs outputs;
      MHA_RETURN_IF_ERROR(forward_(ToForwardInputs(task.inputs), &outputs));
      *out = ToHostOutputs(outputs, task.output_types);
      return Status::Ok();
    });
  }

  Status RunMerged(const std::vector<const InferenceTask*>& tasks, std::vector<HostOutputs>* outs,
                   const ClockSource& clock, PassTimes* times) const override {
    return Guarded("merging the batch", [&] {
      const Clock::time_point start = clock.Now();
      std::vector<const HostInputs*> host;
      std::vector<const OutputTypes*> types;
      for (const InferenceTask* t : tasks) {
        host.push_back(&t->inputs);
        types.push_back(&t->output_types);
      }
      // The general path's inputs wrap the tasks' bytes: kept until the pass is done.
      std::vector<ForwardInputs> inputs;
      MergedBatch merged;
      if (!MergeHostQueries(host, &merged)) {  // host_merge.h: one memcpy a request
        inputs.reserve(tasks.size());
        std::vector<const ForwardInputs*> pointers;
        for (const InferenceTask* t : tasks) {
          inputs.push_back(ToForwardInputs(t->inputs));
          pointers.push_back(&inputs.back());
        }
        merged = MergeInputs(pointers, info_);
      }
      times->merge_us = MicrosBetween(start, clock.Now());
      ForwardOutputs out;
      MHA_RETURN_IF_ERROR(forward_(merged.inputs, &out));
      const Clock::time_point forwarded = clock.Now();
      if (!SplitHostOutputs(merged, out, types, outs)) {
        std::vector<ForwardOutputs> split = SplitOutputs(merged, out, info_);
        if (split.size() != tasks.size()) return Internal("the merged pass lost requests");
        outs->clear();
        for (size_t i = 0; i < split.size(); ++i) {
          outs->push_back(ToHostOutputs(split[i], tasks[i]->output_types));
        }
      }
      times->split_us = MicrosBetween(forwarded, clock.Now());
      return Status::Ok();
    });
  }

  Status RunSteps(const std::vector<const InferenceTask*>& tasks,
                  std::vector<HostOutputs>* outs) const override {
    return StepPass(tasks, [&] {
      std::vector<StepInputs> inputs;
      inputs.reserve(tasks.size());
      std::vector<ForwardOutputs> outputs(tasks.size());
      std::vector<StepItem> items;
      for (size_t i = 0; i < tasks.size(); ++i) {
        const SessionStep& s = *tasks[i]->step;
        inputs.push_back(ToStepInputs(tasks[i]->inputs));
        items.push_back(StepItem{s.cache, s.cross, &inputs.back(), &outputs[i]});
      }
      MHA_RETURN_IF_ERROR(DecodeSteps(*tasks.front()->step->model, items));
      outs->clear();
      for (size_t i = 0; i < tasks.size(); ++i) {
        outs->push_back(ToHostOutputs(outputs[i], tasks[i]->output_types));
      }
      return Status::Ok();
    });
  }

 private:
  const BatchModelInfo info_;
  const BatchForwardFn forward_;
};

}  // namespace

std::unique_ptr<PassRunner> MakePassRunner(BatchModelInfo info, BatchForwardFn forward) {
  return std::make_unique<ForwardPassRunner>(info, std::move(forward));
}

std::unique_ptr<PassRunner> MakeModelPassRunner(std::shared_ptr<const MhaModel> model) {
  const BatchModelInfo info = MakeBatchModelInfo(DescribeModel(*model));
  return MakePassRunner(info,
                        [model = std::move(model)](const ForwardInputs& in, ForwardOutputs* out) {
                          return model->ForwardValidated(in, out);
                        });
}

}  // namespace mha::serve
