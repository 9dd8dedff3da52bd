// Shared by the Llama suites (llama_*_test.cc): the PyTorch fixtures of tests/fixtures/llama
// (scripts/fixtures/llama_reference.py) and the stacks loaded from them.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mha/llama_stack.h"
#include "mha/loader.h"
#include "test_util.h"

namespace mha::testing {

// One case folder: config.json, model.safetensors, io.safetensors, case.json.
struct LlamaCase {
  std::string name;
  std::string dir;
  nlohmann::json meta;  // case.json
  TensorMap io;         // io.safetensors
  const at::Tensor& Io(const std::string& key) const { return io.at(key); }
};

inline nlohmann::json ReadLlamaJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

// index.json's "stateless" or "sessions" list.
inline std::vector<std::string> LlamaCaseNames(const std::string& kind) {
  return ReadLlamaJson(FixturePath("llama/index.json")).value(kind, std::vector<std::string>());
}

inline LlamaCase LoadLlamaCase(const std::string& name) {
  LlamaCase c;
  c.name = name;
  c.dir = FixturePath("llama/" + name);
  c.meta = ReadLlamaJson(c.dir + "/case.json");
  auto io = ReadSafetensors(c.dir + "/io.safetensors");
  EXPECT_TRUE(io.ok()) << io.status().ToString();
  if (io.ok()) c.io = std::move(io.value());
  return c;
}

// The case's checkpoint as a stack on `device` in `dtype` (nullptr, with a test failure, when it
// does not load).
inline std::shared_ptr<LlamaAttentionStack> LoadLlamaStack(const LlamaCase& c,
                                                           const std::string& device = "cpu",
                                                           DType dtype = DType::kFloat32) {
  LlamaStackOptions options;
  options.path = c.dir;
  options.device = device;
  options.dtype = dtype;
  auto stack = LlamaAttentionStack::Create(options);
  EXPECT_TRUE(stack.ok()) << stack.status().ToString();
  return stack.ok() ? *stack : nullptr;
}

// Half precision against the fp32 reference, norm-wise relative error (testing::RelativeError;
// docs/afd.md): over a whole forward or a session's whole sequence of a layer <= 2e-2; over the
// E values of one step <= 5e-2. bfloat16 keeps 8 significant bits: PyTorch's own bfloat16 (Hugging
// Face's formulas in torch 1.13) on tests/fixtures/llama/stack4_sessions is 0.77% off over its
// worst sequence and 1.9% on its worst token; this core's decode steps 0.94% and 2.6%, its
// stateless forward 0.5-0.6% (LibTorch 1.13, CPU). float16 on a CPU computes in float32 (no half
// GEMM there): 0.02% / 0.03%, the outputs' rounding.
constexpr double kLlamaHalfRelTolerance = 2e-2;
constexpr double kLlamaHalfStepRelTolerance = 5e-2;

}  // namespace mha::testing
