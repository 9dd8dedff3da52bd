// The one-layer multi-head-attention kind (torch.nn.MultiheadAttention's weights in any of the
// formats of docs/models.md): the default kind, which claims every version folder no other kind
// claims. Its versions serve stateless forwards (merged by the group-key planner), decoding
// sessions whose steps are Forward calls with a session_id, and the head analysis.
#pragma once

#include "server/serving/kinds/model_kind.h"

namespace mha::serve {

const ModelKind& MultiheadKind();

}  // namespace mha::serve
