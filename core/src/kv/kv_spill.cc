#include "mha/kv_spill.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace mha {

namespace {

std::atomic<int64_t> next_store{0};  // file stores made by this process: their file names differ

// Writes `bytes` from `data` to a new file `path`: "" or the reason it failed (the file removed).
std::string WriteFile(const std::string& path, const void* data, int64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) return std::strerror(errno);
  const size_t n = static_cast<size_t>(bytes);
  std::string error;
  if (n > 0 && std::fwrite(data, 1, n, f) != n) error = std::strerror(errno);
  if (std::fclose(f) != 0 && error.empty()) error = std::strerror(errno);
  if (!error.empty()) std::remove(path.c_str());
  return error;
}

}  // namespace

Status KvSpillStore::CheckRoom(const std::string& key, int64_t bytes, int64_t held) const {
  if (max_bytes() > 0 && held + bytes > max_bytes()) {
    return ResourceExhausted("spill store (" + Describe() + ") full: '" + key + "' needs " +
                             std::to_string(bytes) + " bytes, " + std::to_string(held) + " of " +
                             std::to_string(max_bytes()) + " held (--kv-spill-bytes)");
  }
  return Status::Ok();
}

Status HostSpillStore::Put(const std::string& key, const void* data, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(key) > 0) return AlreadyExists("spill store: '" + key + "' is held already");
  MHA_RETURN_IF_ERROR(CheckRoom(key, bytes, held_));
  const char* begin = static_cast<const char*>(data);
  entries_[key] = bytes > 0 ? std::vector<char>(begin, begin + bytes) : std::vector<char>();
  held_ += bytes;
  return Status::Ok();
}

Status HostSpillStore::Get(const std::string& key, void* out, int64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return NotFound("spill store (host memory): no '" + key + "'");
  if (static_cast<int64_t>(it->second.size()) != bytes) {
    return DataLoss("spill store (host memory): '" + key + "' holds " +
                    std::to_string(static_cast<int64_t>(it->second.size())) + " bytes, " +
                    std::to_string(bytes) + " expected");
  }
  if (bytes > 0) std::memcpy(out, it->second.data(), static_cast<size_t>(bytes));
  return Status::Ok();
}

void HostSpillStore::Remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  held_ -= static_cast<int64_t>(it->second.size());
  entries_.erase(it);
}

int64_t HostSpillStore::bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

int64_t HostSpillStore::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}

StatusOr<std::unique_ptr<FileSpillStore>> FileSpillStore::Create(
    const KvSpillFileOptions& options) {
  namespace fs = std::filesystem;
  if (options.dir.empty()) return InvalidArgument("spill dir: empty path (--kv-spill-dir)");
  if (options.max_bytes < 1) {
    return InvalidArgument("spill dir " + options.dir + ": the byte bound must be >= 1, got " +
                           std::to_string(options.max_bytes) + " (--kv-spill-bytes)");
  }
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (!fs::is_directory(options.dir)) {
    return InvalidArgument("spill dir " + options.dir + " is not a directory and cannot be one" +
                           (ec ? ": " + ec.message() : std::string()));
  }
  std::unique_ptr<FileSpillStore> store(new FileSpillStore(options));
  store->prefix_ = (fs::path(options.dir) / ("mha-kv-spill-" + std::to_string(getpid()) + "-" +
                                             std::to_string(next_store.fetch_add(1)) + "-"))
                       .string();
  const std::string probe = store->prefix_ + "probe";
  const char byte = 0;
  const std::string error = WriteFile(probe, &byte, 1);
  if (!error.empty()) {
    return PermissionDenied("spill dir " + options.dir + " is not writable: writing " + probe +
                            " failed: " + error);
  }
  std::remove(probe.c_str());
  return store;
}

FileSpillStore::~FileSpillStore() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, entry] : entries_) std::remove(entry.path.c_str());
}

std::string FileSpillStore::NextPath() { return prefix_ + std::to_string(next_file_++) + ".kv"; }

Status FileSpillStore::Put(const std::string& key, const void* data, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(key) > 0) return AlreadyExists("spill store: '" + key + "' is held already");
  MHA_RETURN_IF_ERROR(CheckRoom(key, bytes, held_));
  const std::string path = NextPath();
  const std::string error = WriteFile(path, data, bytes);
  if (!error.empty()) {
    return Internal("spill store: writing " + std::to_string(bytes) + " bytes of '" + key +
                    "' to " + path + " failed: " + error);
  }
  entries_[key] = Entry{path, bytes};
  held_ += bytes;
  return Status::Ok();
}

Status FileSpillStore::Get(const std::string& key, void* out, int64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return NotFound("spill store (" + Describe() + "): no '" + key + "'");
  const Entry& e = it->second;
  if (e.bytes != bytes) {
    return DataLoss("spill store: '" + key + "' holds " + std::to_string(e.bytes) + " bytes, " +
                    std::to_string(bytes) + " expected");
  }
  std::FILE* f = std::fopen(e.path.c_str(), "rb");
  if (f == nullptr) {
    return DataLoss("spill store: opening " + e.path + " failed: " + std::strerror(errno));
  }
  const size_t n = static_cast<size_t>(bytes);
  const size_t got = n > 0 ? std::fread(out, 1, n, f) : 0;
  std::fclose(f);
  if (got != n) {
    return DataLoss("spill store: " + e.path + " gave " +
                    std::to_string(static_cast<int64_t>(got)) + " of " + std::to_string(bytes) +
                    " bytes");
  }
  return Status::Ok();
}

void FileSpillStore::Remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  std::remove(it->second.path.c_str());
  held_ -= it->second.bytes;
  entries_.erase(it);
}

int64_t FileSpillStore::bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

int64_t FileSpillStore::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace mha
