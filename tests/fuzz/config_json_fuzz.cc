// config.json text -> the loader's config parsing and its shape cross-checks.
#include <exception>
#include <sstream>
#include <string>

#include "config_file.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  mha::internal::ConfigFile config;
  try {  // LoadWeights catches exceptions the same way
    if (!mha::internal::ParseConfig("fuzz/config.json", in, &config).ok()) return 0;
    mha::MhaOptions options;
    options.embed_dim = 16;
    options.num_heads = 4;
    (void)mha::internal::CheckConfigShapes(config, options);
  } catch (const std::exception&) {
  }
  return 0;
}
