// The merge and split of the commonest merged pass without a LibTorch op per request (the
// host cost per small request): plain self-attention queries on the host of one T, merged by one
// memcpy per request into one tensor; a pass's output
// sliced back by memcpy into buffers of each request's own. MergeInputs and SplitOutputs
// (batch_merge.h) do the same with ATen ops (a from_blob, a pad, a cat, a narrow and a clone per
// request, plus ToHostOutputs' casts and wraps): ~15 us of server CPU a request at c=32 on a 2-core
// box. Each function here returns false, having changed nothing, for a batch that is not one of
// these; the pass runner then takes the general path. Exact: the same bytes as the general path.
#pragma once

#include <vector>

#include "mha/host_io.h"
#include "server/serving/kinds/multihead/merge/batch_merge.h"

namespace mha::serve {

// Every request a host query [B_i, T, E] of one dtype, T and E, with no key, value, mask, head
// option or weights: `batch` as MergeInputs makes it (query [sum B_i, T, E]). Requests of several
// T are MergeInputs' (the shorter ones' padded keys need a key padding mask).
bool MergeHostQueries(const std::vector<const HostInputs*>& requests, MergedBatch* batch);

// `merged` holds only a contiguous host output of the element type every request asked for, and no
// request wants it in a device place: each request's rows [B_i, T_i, E] copied into a buffer of
// its own, as `outs` (one HostOutputs a request, only output set).
bool SplitHostOutputs(const MergedBatch& batch, const ForwardOutputs& merged,
                      const std::vector<const OutputTypes*>& types, std::vector<HostOutputs>* outs);

}  // namespace mha::serve
