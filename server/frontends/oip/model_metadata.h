// What the Open Inference Protocol says about a model: ModelMetadata (KServe), ModelConfig and
// the RepositoryIndex entry (Triton), filled from a repository entry, as FillModelInfo does for
// mha.v1.
//
// Shapes: the batch dimension B is part of every tensor's shape and ModelConfig.max_batch_size is
// 0, because attn_mask [T,S] has no batch dimension (Triton's implicit batching would prepend
// one to every input). Variable dimensions are -1: query [-1,-1,E], key [-1,-1,kdim],
// value [-1,-1,vdim], key_padding_mask [-1,-1], attn_mask [-1,-1] (a [B*H,T,S] mask is accepted
// too), output [-1,-1,E], attn_weights [-1,-1,-1] (averaged; per-head weights have rank 4).
// Masks are listed as BOOL (floating masks are accepted too); key, value and the masks are
// optional inputs.
#pragma once

#include "inference/grpc_service.pb.h"
#include "inference/model_config.pb.h"
#include "server/serving/inference_server.h"
#include "server/serving/model_controller.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve::oip {

inline constexpr char kPlatform[] = "pytorch_libtorch";
inline constexpr char kBackend[] = "mha_serve";

// `entry` must be READY (it has a model); the caller resolves it first.
void FillModelMetadata(const ModelEntry& entry, inference::ModelMetadataResponse* out);
// `scheduling`: the served version's (InferenceServer::Scheduling); without it (a version not being
// served) ModelConfig has no instance group and no dynamic_batching section.
void FillModelConfig(const ModelEntry& entry, const std::optional<SchedulerView>& scheduling,
                     inference::ModelConfig* out);

// Triton's state words: READY, LOADING, UNLOADING, or UNAVAILABLE (FAILED, with the error as the
// reason; or a model folder that is not loaded, reason "not loaded").
void FillModelIndex(const IndexEntry& entry, inference::RepositoryIndexResponse::ModelIndex* out);

}  // namespace mha::serve::oip
