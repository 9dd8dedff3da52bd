// The ModelInfer parameters that are not tensor options: Triton's reserved `timeout` and
// `priority`, the sequence extension (sequence_id, sequence_start, sequence_end), and the rule
// that no parameter is silently ignored: a request parameter the server does not know, and any
// input or output parameter other than Triton's shared-memory ones (infer_shm.h) is
// INVALID_ARGUMENT naming it.
#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "mha/text.h"
#include "server/frontends/oip/infer_request.h"

namespace mha::serve::oip {
namespace {

using Parameter = inference::InferParameter;

// Every request parameter the server reads (infer_request.cc, infer_heads.cc, below).
constexpr std::array<const char*, 15> kKnown = {"is_causal",
                                                "need_weights",
                                                "average_attn_weights",
                                                "head_stats",
                                                "weights_heads",
                                                "weights_query_begin",
                                                "weights_query_end",
                                                "weights_top_k",
                                                "weights_dtype",
                                                "weights_topk_indices_dtype",
                                                "timeout",
                                                "priority",
                                                "sequence_id",
                                                "sequence_start",
                                                "sequence_end"};

std::string KnownList() {
  std::string list;
  for (const char* k : kKnown) list += std::string(list.empty() ? "" : ", ") + k;
  return list;
}

// A non-negative integer parameter (int64_param or uint64_param); nullopt when absent.
StatusOr<std::optional<uint64_t>> Unsigned(const inference::ModelInferRequest& r,
                                           const char* name) {
  const Parameter* p = FindParameter(r, name);
  if (p == nullptr) return std::optional<uint64_t>();
  if (p->parameter_choice_case() == Parameter::kUint64Param) {
    return std::optional<uint64_t>(p->uint64_param());
  }
  if (p->parameter_choice_case() == Parameter::kInt64Param && p->int64_param() >= 0) {
    return std::optional<uint64_t>(static_cast<uint64_t>(p->int64_param()));
  }
  return InvalidArgument(std::string("parameters.") + name +
                         ": must be a non-negative int64_param or uint64_param");
}

StatusOr<bool> Flag(const inference::ModelInferRequest& r, const char* name) {
  const Parameter* p = FindParameter(r, name);
  if (p == nullptr) return false;
  if (p->parameter_choice_case() != Parameter::kBoolParam) {
    return InvalidArgument(std::string("parameters.") + name + ": must be a bool_param");
  }
  return p->bool_param();
}

// Every parameter is one the server reads; inputs and outputs take none.
Status CheckKnown(const inference::ModelInferRequest& r) {
  for (const auto& [name, value] : r.parameters()) {
    if (std::find(kKnown.begin(), kKnown.end(), name) == kKnown.end()) {
      return InvalidArgument("parameters: unknown parameter '" + Abbreviate(name) +
                             "' (the server reads " + KnownList() + ")");
    }
  }
  for (int i = 0; i < r.inputs_size(); ++i) {
    for (const auto& [name, value] : r.inputs(i).parameters()) {
      if (IsShmParameter(name)) continue;  // infer_shm.h
      return InvalidArgument("inputs[" + std::to_string(i) + "].parameters: '" + Abbreviate(name) +
                             "' is not supported (inputs take only shared_memory_region, "
                             "shared_memory_byte_size, shared_memory_offset)");
    }
  }
  for (int i = 0; i < r.outputs_size(); ++i) {
    for (const auto& [name, value] : r.outputs(i).parameters()) {
      if (IsShmParameter(name)) continue;
      return InvalidArgument("outputs[" + std::to_string(i) + "]: parameter " + Abbreviate(name) +
                             " is not supported");
    }
  }
  return Status::Ok();
}

Status DecodeSequence(const inference::ModelInferRequest& r, SequenceControl* sequence) {
  const Parameter* id = FindParameter(r, "sequence_id");
  if (id != nullptr) {
    switch (id->parameter_choice_case()) {
      case Parameter::kStringParam:
        if (id->string_param().size() > 128) {
          return InvalidArgument("parameters.sequence_id: a string id is at most 128 bytes");
        }
        sequence->id = id->string_param();
        break;
      case Parameter::kUint64Param:
        if (id->uint64_param() != 0) sequence->id = std::to_string(id->uint64_param());
        break;
      case Parameter::kInt64Param:
        if (id->int64_param() < 0) {
          return InvalidArgument("parameters.sequence_id: must not be negative");
        }
        if (id->int64_param() != 0) sequence->id = std::to_string(id->int64_param());
        break;
      default:
        return InvalidArgument(
            "parameters.sequence_id: must be an int64_param, uint64_param or string_param");
    }
  }
  auto start = Flag(r, "sequence_start");
  if (!start.ok()) return start.status();
  auto end = Flag(r, "sequence_end");
  if (!end.ok()) return end.status();
  sequence->start = *start;
  sequence->end = *end;
  if ((sequence->start || sequence->end) && sequence->id.empty()) {
    return InvalidArgument(
        "parameters.sequence_start/sequence_end need a sequence_id (not 0 or \"\")");
  }
  return Status::Ok();
}

}  // namespace

const inference::InferParameter* FindParameter(const inference::ModelInferRequest& request,
                                               const char* name) {
  const auto it = request.parameters().find(name);
  return it == request.parameters().end() ? nullptr : &it->second;
}

Status DecodeControlParameters(const inference::ModelInferRequest& r, InferCall* call) {
  MHA_RETURN_IF_ERROR(CheckKnown(r));
  auto timeout = Unsigned(r, "timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) {
    call->timeout_us = static_cast<int64_t>(
        std::min<uint64_t>(**timeout, uint64_t{std::numeric_limits<int64_t>::max()}));
  }
  auto priority = Unsigned(r, "priority");  // checked, then ignored: one priority level
  if (!priority.ok()) return priority.status();
  return DecodeSequence(r, &call->sequence);
}

void ApplyTimeout(InferCall* call) {
  if (!call->timeout_us) return;
  InferenceRequest& r = call->request;
  // Past ~292 years from now the deadline is "none" (no overflow of the clock's count).
  const int64_t max_us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::time_point::max() - r.start)
          .count();
  if (*call->timeout_us >= max_us) return;
  const Clock::time_point deadline = r.start + std::chrono::microseconds(*call->timeout_us);
  r.deadline = std::min(r.deadline, deadline);
}

}  // namespace mha::serve::oip
