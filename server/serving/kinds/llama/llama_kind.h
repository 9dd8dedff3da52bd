// The Llama-family kind (docs/afd.md): a checkpoint folder whose config.json has hidden_size,
// num_attention_heads and num_hidden_layers, loaded whole as one stack of grouped-query
// attention layers with RoPE. Its versions serve stateless forwards of one layer (one request
// per pass), decoding sessions with one KV cache per layer, and LayerSteps messages.
#pragma once

#include "server/serving/kinds/model_kind.h"

namespace mha::serve {

const ModelKind& LlamaKind();

}  // namespace mha::serve
