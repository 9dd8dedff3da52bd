#include "server/serving/sessions/session_options.h"

#include "mha/text.h"

namespace mha::serve {

StatusOr<KvFullPolicy> ParseKvFullPolicy(const std::string& name) {
  if (name == "refuse") return KvFullPolicy::kRefuse;
  if (name == "evict-lru") return KvFullPolicy::kEvictLru;
  if (name == "spill") return KvFullPolicy::kSpill;
  return InvalidArgument("--kv-cache-full-policy: '" + Abbreviate(name) +
                         "' is not a policy (refuse, evict-lru, spill)");
}

const char* KvFullPolicyName(KvFullPolicy policy) {
  switch (policy) {
    case KvFullPolicy::kEvictLru:
      return "evict-lru";
    case KvFullPolicy::kSpill:
      return "spill";
    case KvFullPolicy::kRefuse:
      break;
  }
  return "refuse";
}

}  // namespace mha::serve
