// Where a session's KV cache goes when the block pool is full and the session is idle (the
// spill policy): KvCache::Spill copies its tokens' keys and values into a KvSpillStore under a key
// and gives its blocks back; KvCache::Restore takes blocks again and copies the bytes back exactly.
// Two stores: host memory (for a pool on a GPU) and files in a directory bounded by a byte budget
// (for a pool on the CPU, where host memory is the pool's own). No LibTorch here: the serving
// layer owns the store. Both stores are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mha/status.h"

namespace mha {

class KvSpillStore {
 public:
  virtual ~KvSpillStore() = default;

  // Keeps `bytes` bytes from `data` under `key`. ALREADY_EXISTS for a key it holds;
  // RESOURCE_EXHAUSTED naming the numbers when the store's bound would be exceeded; INTERNAL
  // naming the file when a write fails (nothing kept).
  virtual Status Put(const std::string& key, const void* data, int64_t bytes) = 0;
  // Copies the bytes kept under `key` into `out` (`bytes` of them). NOT_FOUND for an unknown
  // key; DATA_LOSS when the store holds another size or a read comes back short.
  virtual Status Get(const std::string& key, void* out, int64_t bytes) const = 0;
  // Forgets `key` (and removes its file); nothing for an unknown key.
  virtual void Remove(const std::string& key) = 0;

  virtual int64_t bytes_held() const = 0;    // over every key
  virtual int64_t entries() const = 0;       // keys held
  virtual int64_t max_bytes() const = 0;     // the bound; 0 = none
  virtual std::string Describe() const = 0;  // "host memory", "files under /var/spill"

 protected:
  // The RESOURCE_EXHAUSTED of a Put of `bytes` over the bound, or OK.
  Status CheckRoom(const std::string& key, int64_t bytes, int64_t held) const;
};

// Host memory, optionally bounded (max_bytes 0 = no bound but the host's).
class HostSpillStore final : public KvSpillStore {
 public:
  explicit HostSpillStore(int64_t max_bytes = 0) : max_bytes_(max_bytes) {}

  Status Put(const std::string& key, const void* data, int64_t bytes) override;
  Status Get(const std::string& key, void* out, int64_t bytes) const override;
  void Remove(const std::string& key) override;
  int64_t bytes_held() const override;
  int64_t entries() const override;
  int64_t max_bytes() const override { return max_bytes_; }
  std::string Describe() const override { return "host memory"; }

 private:
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<char>> entries_;  // guarded by mu_
  int64_t held_ = 0;                                  // guarded by mu_
};

struct KvSpillFileOptions {
  std::string dir;        // created when absent (--kv-spill-dir)
  int64_t max_bytes = 0;  // >= 1: the bound on the bytes of every file it keeps (--kv-spill-bytes)
};

// One file per key in a directory, bounded by max_bytes. Every file it wrote is removed when
// the store is destroyed (or its key removed).
class FileSpillStore final : public KvSpillStore {
 public:
  // INVALID_ARGUMENT for an empty dir, max_bytes < 1, or a dir that is not a directory and cannot
  // be created; PERMISSION_DENIED when a probe file cannot be written there. Names the dir and
  // the system's reason.
  static StatusOr<std::unique_ptr<FileSpillStore>> Create(const KvSpillFileOptions& options);
  ~FileSpillStore() override;
  FileSpillStore(const FileSpillStore&) = delete;
  FileSpillStore& operator=(const FileSpillStore&) = delete;

  Status Put(const std::string& key, const void* data, int64_t bytes) override;
  Status Get(const std::string& key, void* out, int64_t bytes) const override;
  void Remove(const std::string& key) override;
  int64_t bytes_held() const override;
  int64_t entries() const override;
  int64_t max_bytes() const override { return options_.max_bytes; }
  std::string Describe() const override { return "files under " + options_.dir; }

 private:
  explicit FileSpillStore(KvSpillFileOptions options) : options_(std::move(options)) {}
  std::string NextPath();  // mu_ held

  struct Entry {
    std::string path;
    int64_t bytes = 0;
  };
  const KvSpillFileOptions options_;
  std::string prefix_;  // dir/mha-kv-spill-<pid>-<store>-
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // guarded by mu_
  int64_t held_ = 0, next_file_ = 0;      // guarded by mu_
};

}  // namespace mha
