#include "server/serving/repository/default_model.h"

#include <string>

#include "mha/options.h"
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
  // Its weights come from a fixed seed in its dtype on its device: what the shared KV store
  // compares before a replica restores another's session (no file to hash).
  entry.fingerprint =
      std::string("builtin.") + DTypeName(entry.info.options.dtype) + "." + entry.info.device;
  entry.state = ModelState::kReady;
  return entry;
}

}  // namespace mha::serve
