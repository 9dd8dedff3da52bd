// Open Inference Protocol v2 ModelInferRequest <-> the protocol-neutral InferenceRequest and
// InferenceResponse, the counterpart of server/frontends/grpc_v1/forward_request. Decoding does the
// wire's own checks only (message size, tensor names and datatypes, where the bytes are, the
// header check of proto/wire/tensor_header: dims > 0, overflow-checked byte counts), then builds
// the tensors with proto/wire/tensor_codec; shapes, the model and the limits are ServerCore's to
// validate, once, with the same codes and messages as for mha.v1.
//
// Tensor mapping (names are the model's input and output names in ModelMetadata/ModelConfig):
//   inputs   query [B,T,E]; key [B,S,kdim] and value [B,S,vdim] (both or neither);
//            key_padding_mask [B,S] (BOOL or float); attn_mask [T,S] or [B*H,T,S] (BOOL or float)
//            head_mask [H] or [B,H] (float; docs/heads.md)
//   params   is_causal, need_weights, average_attn_weights, head_stats: bool_param;
//            weights_query_begin, weights_query_end, weights_top_k: int64_param;
//            weights_heads: string_param "2,0" (or int64_param for one head);
//            weights_dtype ("FP32", "FP16", "BF16"), weights_topk_indices_dtype ("INT32",
//            "INT64"): string_param. Triton's reserved `timeout` (int64/uint64, microseconds:
//            the request's deadline) and `priority` (accepted, ignored: one priority level), and
//            the sequence extension's sequence_id (int64/uint64 or string), sequence_start,
//            sequence_end (bool) (infer_parameters.cc). Any other request, input or output
//            parameter is INVALID_ARGUMENT naming it: none is silently ignored.
//   outputs  output [B,T,E]; attn_weights [B,T,S'] (averaged) or [B,H,T,S'] (per head), or with
//            weights_top_k attn_weights_topk_values and attn_weights_topk_indices [..,k];
//            head_entropy and head_max_weight [B,H,T] FP32 with head_stats
// Datatypes FP32, FP16, BF16 and BOOL (masks only). Inputs come either all in raw_input_contents
// or each in contents (fp32_contents for FP32, bool_contents for BOOL; FP16/BF16 raw only);
// outputs always go in raw_output_contents.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"
#include "server/frontends/oip/infer_shm.h"
#include "server/frontends/shm/shared_memory_registry.h"
#include "server/serving/inference.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve::oip {

inline constexpr char kQuery[] = "query";
inline constexpr char kKey[] = "key";
inline constexpr char kValue[] = "value";
inline constexpr char kKeyPaddingMask[] = "key_padding_mask";
inline constexpr char kAttnMask[] = "attn_mask";
inline constexpr char kOutput[] = "output";
inline constexpr char kAttnWeights[] = "attn_weights";
inline constexpr char kIsCausal[] = "is_causal";
inline constexpr char kNeedWeights[] = "need_weights";
inline constexpr char kAverageAttnWeights[] = "average_attn_weights";
inline constexpr char kHeadMask[] = "head_mask";
inline constexpr char kHeadStats[] = "head_stats";
inline constexpr char kTopkValues[] = "attn_weights_topk_values";
inline constexpr char kTopkIndices[] = "attn_weights_topk_indices";
inline constexpr char kHeadEntropy[] = "head_entropy";
inline constexpr char kHeadMaxWeight[] = "head_max_weight";

// An input's datatype (proto/wire/dtype_table.h): "FP32" -> v1::FLOAT32, "FP16", "BF16", "BOOL";
// INVALID_ARGUMENT naming `field` for any other datatype. (Names of outputs: OipDatatypeName.)
// The request's parameter `name`, or nullptr when it has none.
const inference::InferParameter* FindParameter(const inference::ModelInferRequest& request,
                                               const char* name);

StatusOr<v1::DataType> ParseDatatype(const std::string& datatype, std::string_view field);

enum class OutputTensor {
  kOutput,
  kAttnWeights,
  kTopkValues,
  kTopkIndices,
  kHeadEntropy,
  kHeadMaxWeight
};
const char* OutputName(OutputTensor output);

// Triton's sequence extension: a request of a sequence is a step of a decoding session.
struct SequenceControl {
  std::string id;  // sequence_id as text; "" = not part of a sequence (also sequence_id 0 / "")
  bool start = false;
  bool end = false;
};

// A decoded ModelInfer call: the request for ServerCore::Infer and what the answer must carry.
struct InferCall {
  InferenceRequest request;
  std::vector<OutputTensor> outputs;  // the response's outputs, in this order
  std::string id;                     // echoed in the response
  std::optional<int64_t> timeout_us;  // parameters.timeout
  SequenceControl sequence;
  ShmPlan shm;  // the shared-memory regions its tensors use (infer_shm.h)
};

struct DecodeOptions {
  int64_t max_message_bytes = kDefaultMaxMessageBytes;  // a request above it is RESOURCE_EXHAUSTED
  // The input tensors point into the request's bytes (no copy) where alignment allows; the
  // request must then outlive the Infer call.
  bool borrow = false;
  // Registered shared-memory regions (infer_shm.h); null = a tensor naming a region is refused.
  const SharedMemoryRegistry* shm = nullptr;
};

StatusOr<InferCall> DecodeModelInferRequest(const inference::ModelInferRequest& request,
                                            const DecodeOptions& options);

// The parameters no tensor option reads (infer_parameters.cc): timeout, priority and the
// sequence extension; INVALID_ARGUMENT for a request, input or output parameter not known.
Status DecodeControlParameters(const inference::ModelInferRequest& request, InferCall* call);

// The request's deadline becomes the earlier of its own and start + parameters.timeout.
void ApplyTimeout(InferCall* call);

// The head parameters (infer_heads.cc): weights_heads, weights_query_begin/end, weights_top_k,
// weights_dtype, weights_topk_indices_dtype, head_stats. With weights_heads and no
// average_attn_weights parameter the weights are per head (`average_sent`: it was sent).
Status DecodeHeadParameters(const inference::ModelInferRequest& request, bool average_sent,
                            HostInputs* in);

// The requested outputs (infer_heads.cc; `need_weights`: the parameter, unset when not sent).
// None listed = output, plus attn_weights (or the two top-k outputs with weights_top_k) when
// need_weights, plus head_entropy and head_max_weight with head_stats. Listing a weights output
// implies need_weights (INVALID_ARGUMENT when need_weights was sent false), a top-k output needs
// weights_top_k and attn_weights needs its absence; listing a head statistic implies head_stats.
// Sets in->need_weights and in->head_stats to what the forward pass must do.
StatusOr<std::vector<OutputTensor>> SelectOutputs(const inference::ModelInferRequest& request,
                                                  std::optional<bool> need_weights, HostInputs* in);

// An OK response: model name and version, `id`, the selected outputs (datatype and shape in
// `outputs`, bytes in raw_output_contents), parameters queue_us and compute_us. With `shm` (the
// call's plan): the input regions are checked intact, and each output placed in a region is
// written there (infer_shm.h: WriteShmOutput) with an empty raw_output_contents entry.
Status EncodeModelInferResponse(const InferenceResponse& response,
                                const std::vector<OutputTensor>& outputs, const std::string& id,
                                inference::ModelInferResponse* out, const ShmPlan* shm = nullptr);

}  // namespace mha::serve::oip
