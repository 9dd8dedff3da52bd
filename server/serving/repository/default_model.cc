#include "server/serving/repository/default_model.h"

#include "server/serving/kinds/model_kind.h"

namespace mha::serve {

ModelEntry MakeDefaultModel(const LoadOverrides& overrides) {
  ModelEntry entry;
  entry.name = kDefaultModelName;
  entry.source = "builtin";
  entry.kind = &BuiltinKind();
  Status loaded = entry.kind->LoadBuiltin(overrides, &entry);
  if (loaded.ok()) loaded = ChooseKvCacheDtype(overrides, &entry);
  if (!loaded.ok()) {
    entry.state = ModelState::kFailed;
    entry.error = loaded.ToString();
    entry.servable.reset();
    return entry;
  }
  entry.state = ModelState::kReady;
  return entry;
}

}  // namespace mha::serve
