// Bytes -> format detection by content (safetensors header, torch.save vs TorchScript zip).
// torch::jit::load itself is LibTorch's and not fuzzed here.
#include "fuzz_common.h"
#include "mha/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)mha::DetectWeightsFormatFromBytes(data, size, "fuzz.bin");
  return 0;
}
