// The model kinds this server knows, in the order they are asked to claim a version folder: the
// one place that lists them (a new kind is a folder and one line here). The last, the one-layer
// MHA model, claims every folder.
#include <vector>

#include "server/serving/kinds/llama/llama_kind.h"
#include "server/serving/kinds/model_kind.h"
#include "server/serving/kinds/multihead/multihead_kind.h"

namespace mha::serve {

namespace {

const std::vector<const ModelKind*>& Kinds() {
  static const std::vector<const ModelKind*> kinds = {&LlamaKind(), &MultiheadKind()};
  return kinds;
}

}  // namespace

const ModelKind& KindFor(const ServingConfig& config) {
  for (const ModelKind* kind : Kinds()) {
    if (kind->Claims(config)) return *kind;
  }
  return BuiltinKind();
}

const ModelKind& BuiltinKind() { return *Kinds().back(); }

}  // namespace mha::serve
