#include "server/serving/sessions/session_spill.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>

#include "mha/text.h"

namespace mha::serve {
namespace {

// The version's subdirectory name: model and version with anything but [A-Za-z0-9._-] as '_',
// then the process and a counter (a reloaded version gets a new one).
std::string VersionDirName(const SessionLocation& location) {
  static std::atomic<int64_t> next{0};
  std::string name = location.model + "-v" + location.version;
  for (char& c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  return name + "-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
}

}  // namespace

StatusOr<std::shared_ptr<KvSpillStore>> MakeSpillStore(const SessionOptions& options,
                                                       const SessionLocation& location,
                                                       bool pool_on_cpu) {
  if (!pool_on_cpu) return std::shared_ptr<KvSpillStore>(new HostSpillStore(options.spill_bytes));
  const std::string dir =
      (std::filesystem::path(options.spill_dir) / VersionDirName(location)).string();
  auto store = FileSpillStore::Create({dir, options.spill_bytes});
  if (!store.ok()) {
    std::error_code ignored;
    std::filesystem::remove(dir, ignored);
    return Status(store.status().code(), "--kv-spill-dir: " + store.status().message());
  }
  // The files go with the store, then its directory (empty by then).
  return std::shared_ptr<KvSpillStore>(store->release(), [dir](KvSpillStore* s) {
    delete s;
    std::error_code ignored;
    std::filesystem::remove(dir, ignored);
  });
}

Status CheckSpillDir(const SessionOptions& options) {
  if (options.full_policy != KvFullPolicy::kSpill) return Status::Ok();
  auto store = FileSpillStore::Create({options.spill_dir, options.spill_bytes});
  if (store.ok()) return Status::Ok();
  return Status(store.status().code(), "--kv-spill-dir: " + store.status().message() +
                                           " (--kv-cache-full-policy spill spills there)");
}

Status CheckBranchTokens(const std::string& id, int64_t tokens, int64_t length) {
  const std::string holds =
      "session '" + Abbreviate(id) + "' holds " + std::to_string(length) + " tokens";
  if (tokens < 0) {
    return InvalidArgument("tokens: " + std::to_string(tokens) + " is below 0 (" + holds + ")");
  }
  if (tokens > length) {
    return OutOfRange("tokens: " + std::to_string(tokens) + " is past the session's length (" +
                      holds + ")");
  }
  return Status::Ok();
}

}  // namespace mha::serve
