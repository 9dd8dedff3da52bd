// config.json text -> the one config.json reader (mha::ParseModelConfig): every core key's type
// and range (the serving keys are read from the object it keeps).
#include <exception>
#include <sstream>
#include <string>

#include "fuzz_common.h"
#include "mha/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {  // LoadWeights and the repository catch exceptions the same way
    auto config = mha::ParseModelConfig(in, "fuzz/config.json");
    (void)config;
  } catch (const std::exception&) {
  }
  return 0;
}
