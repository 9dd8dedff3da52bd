#include "server/serving/repository/fingerprint.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <vector>

namespace mha::serve {
namespace {

constexpr uint64_t kOffset = 1469598103934665603ull;
constexpr uint64_t kPrime = 1099511628211ull;

void Mix(uint64_t* h, const char* data, size_t n) {
  uint64_t v = *h;
  for (size_t i = 0; i < n; ++i) {
    v ^= static_cast<unsigned char>(data[i]);
    v *= kPrime;
  }
  *h = v;
}

}  // namespace

StatusOr<std::string> FingerprintFiles(const std::vector<std::string>& paths,
                                       const std::string& root) {
  uint64_t h = kOffset;
  std::vector<char> buffer(1 << 20);
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFound(path + ": cannot open to fingerprint it");
    const bool under = !root.empty() && path.compare(0, root.size(), root) == 0;
    std::string name = under ? path.substr(root.size()) : path;
    if (under) name.erase(0, name.find_first_not_of('/'));  // "root/" and "root" alike
    Mix(&h, name.data(), name.size() + 1);                  // with the NUL: "ab"+"c" != "a"+"bc"
    uint64_t size = 0;
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const size_t got = static_cast<size_t>(in.gcount());
      Mix(&h, buffer.data(), got);
      size += got;
    }
    if (in.bad()) return Internal(path + ": read error while fingerprinting");
    Mix(&h, reinterpret_cast<const char*>(&size), sizeof(size));
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string(hex);
}

}  // namespace mha::serve
