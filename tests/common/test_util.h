// Test helpers shared by every tier: tensor comparison and the PyTorch-generated fixture cases
// (tests/fixtures, written by scripts/fixtures/gen_fixtures.py).
#pragma once

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mha/host_io.h"
#include "mha/model.h"
#include "mha/status.h"
#include "test_paths.h"

namespace mha::testing {

// Largest |actual - expected| (in float64, on CPU). +inf when shapes differ or NaNs do not line up.
double MaxAbsDiff(const at::Tensor& actual, const at::Tensor& expected);
// Norm-wise relative error ||actual - expected||_2 / ||expected||_2, used for fp16/bf16. Not the
// worst element: bf16 keeps ~3 significant digits, and PyTorch's own bf16 nn.MultiheadAttention
// on the larger_e64 case is 2.2% off in its worst element but 0.66% norm-wise.
double RelativeError(const at::Tensor& actual, const at::Tensor& expected);

// EXPECT_TRUE(TensorsNear(a, b, 1e-5)) with shapes and the worst element in the failure message.
::testing::AssertionResult TensorsNear(const at::Tensor& actual, const at::Tensor& expected,
                                       double atol);

// The Open Inference Protocol datatype of a tensor's dtype ("FP32", "FP16", "BF16", "BOOL"), for
// the OIP gRPC and REST service tests; another dtype is a test failure (answers "").
std::string OipDatatype(at::ScalarType type);

// EXPECT_TRUE(Contains(message, part)) with both strings in the failure message.
::testing::AssertionResult Contains(const std::string& text, const std::string& part);

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Absolute path of a file under tests/fixtures.
std::string FixturePath(const std::string& relative);

// One case written by scripts/fixtures/gen_fixtures.py: tests/fixtures/cases/<name>/{case.json,
// io.safetensors, config.json, model.*}.
struct FixtureCase {
  std::string name;
  std::string dir;              // absolute path of the case folder (a valid model-repository entry)
  std::string weights_path;     // the model.* file in it
  nlohmann::json meta;          // case.json
  ForwardInputs inputs;         // flags and tensors from case.json + io.safetensors
  at::Tensor expected_output;   // [B, T, E] float32
  at::Tensor expected_weights;  // undefined unless need_weights
};

std::vector<std::string> FixtureCaseNames();  // cases/index.json
StatusOr<FixtureCase> LoadFixtureCase(const std::string& name);
// fp32 tolerance against the PyTorch fixtures.
constexpr double kFp32Tolerance = 1e-5;

// The devices this build's tests run on: "cpu", and "cuda" when LibTorch sees a GPU (CPU CI has
// no cuda cases; a GPU machine runs both).
std::vector<std::string> TestDevices();

// Tests build requests as ATen tensors (ForwardInputs) and read answers as ATen tensors; the
// serving layer carries host tensors (mha/host_io.h). These convert through the core's adapter
// (mha/tensor_adapter.h): inputs copied to owned host memory, answers wrapped without a copy.
HostInputs ToHostInputs(const ForwardInputs& in);
ForwardOutputs ToForwardOutputs(const HostOutputs& out);

// The case's model, loaded on `device` in `dtype` (nullptr, with a test failure, when it does not
// load).
std::shared_ptr<MhaModel> LoadCaseModel(const FixtureCase& c, const std::string& device = "cpu",
                                        DType dtype = DType::kFloat32);

}  // namespace mha::testing
