// Change detection for model versions: a content hash, not mtime + size. Copying a file over
// another of the same size within the file system's timestamp granularity (or with preserved
// timestamps, `cp -p`, rsync -t, an atomic rename of a prepared file) leaves mtime + size as they
// were; the bytes do not lie. Cost: every file of a version is read once per scan (the weights at
// ~1 GB/s), which bounds how often --repository-poll-secs should scan large repositories.
#pragma once

#include <string>
#include <vector>

#include "mha/status.h"

namespace mha::serve {

// 64-bit FNV-1a over each file's name relative to `root`, size and bytes, in the given order, as 16
// hex digits. The same version in two repositories (two replicas' mounts) has one fingerprint: the
// shared KV store compares it to decide whether a session's keys came from these weights.
StatusOr<std::string> FingerprintFiles(const std::vector<std::string>& paths,
                                       const std::string& root = "");

}  // namespace mha::serve
