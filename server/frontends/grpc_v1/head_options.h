// The head options of mha.v1 (docs/heads.md) between the wire and the core: ForwardRequest's
// weights_* / head_stats / head_mask fields -> HostInputs, the selected weights and head
// statistics -> ForwardResponse, and ModelAnalysis from the core's HeadAnalysis. Only the wire's
// own checks here (dtypes); ranges against the model are the core's (mha/head_selection.h).
#pragma once

#include "mha/v1/attention.pb.h"
#include "server/serving/inference.h"
#include "server/serving/inference_server.h"

namespace mha::serve {

// Fills in->weights_selection, weights_dtype, head_stats and head_mask. When weights_heads is
// given and average_attn_weights unset, the weights are per head (the heads asked for).
Status DecodeHeadOptions(const v1::ForwardRequest& request, bool borrow, HostInputs* in);

// attn_weights (dense selection), or the top-k values and indices; head_entropy /
// head_max_weight when computed. Each in the element type the core answered in.
Status EncodeHeadOutputs(const HostOutputs& outputs, v1::ForwardResponse* out);

void FillModelAnalysis(const ModelAnalysisResult& result, v1::ModelAnalysis* out);

}  // namespace mha::serve
