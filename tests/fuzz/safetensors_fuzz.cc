// safetensors bytes -> ReadSafetensors (in memory) -> key-layout detection, as LoadWeights runs
// them.
#include <exception>

#include "fuzz_common.h"
#include "load/layouts.h"
#include "mha/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tensors = mha::ReadSafetensorsFromBytes(data, size, "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  try {  // LoadWeights catches exceptions the same way
    (void)mha::internal::ExtractLayout("fuzz.safetensors", tensors.value());
  } catch (const std::exception&) {
  }
  return 0;
}
