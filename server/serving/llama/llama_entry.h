// A Llama-family checkpoint folder as one model version of the repository (docs/afd.md): its
// detection at scan time (config.json with hidden_size, num_attention_heads, num_hidden_layers),
// the files its fingerprint covers, its load (all L layers as one stack), its warmup and its log
// line. The rest of the repository treats it as any version; ModelEntry::llama is set when READY.
#pragma once

#include <string>
#include <vector>

#include "mha/llama_engine.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/repository/serving_config.h"

namespace mha::serve {

// Whether a version's (layered) config.json describes a Llama-family stack.
bool IsLlamaFolder(const ServingConfig& config);

// The version folder `dir` of a Llama model: the checkpoint files (LlamaCheckpointFiles).
StatusOr<std::vector<std::string>> LlamaFolderFiles(const std::string& dir);

// What LoadLlamaModel gets for `entry` (entry.path is its folder): the nearest config.json (the
// version folder's, else the model folder's), dtype and device from the server's flags over
// config.json's "dtype"/"device" (float32, "auto" unless set).
LlamaLoadOptions LlamaLoadOptionsFor(const ModelEntry& entry, const LoadOverrides& overrides);

// A loaded stack into `entry`: READY, `llama` and `llama_info` set, and `info` filled as the
// one-layer models' (embed_dim = E, num_heads = H, the dtypes, device, parameters) for the code
// that reads shapes from it; format "safetensors", layout "llama".
void SetLlamaModel(LoadedLlamaModel loaded, ModelEntry* entry);

// The warmup passes of a freshly loaded stack (config.json's "warmup" shapes, else one [1, 16, E]
// pass): a stateless forward of layer 0 each (need_weights does not apply). A failed given
// warmup makes the version FAILED; a failed default one is logged.
void WarmupLlama(ModelEntry* entry);

// The READY line of the start-up log for a Llama version.
void LogLlamaModel(const ModelEntry& entry, bool is_default);

}  // namespace mha::serve
