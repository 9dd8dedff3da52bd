#include "test_util.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "mha/loader.h"
#include "mha/tensor_adapter.h"

namespace mha::testing {
namespace {

at::Tensor AsDouble(const at::Tensor& t) { return t.detach().to(at::kCPU).to(at::kDouble); }

bool SameShape(const at::Tensor& a, const at::Tensor& b) { return a.sizes().equals(b.sizes()); }

StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
}

std::string ShapeString(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

HostInputs ToHostInputs(const ForwardInputs& in) {
  auto copy = [](const at::Tensor& t) { return ToHost(t.defined() ? t.clone() : t); };
  HostInputs h;
  h.query = copy(in.query);
  h.key = copy(in.key);
  h.value = copy(in.value);
  h.key_padding_mask = copy(in.key_padding_mask);
  h.attn_mask = copy(in.attn_mask);
  h.is_causal = in.is_causal;
  h.need_weights = in.need_weights;
  h.average_attn_weights = in.average_attn_weights;
  h.weights_selection = in.weights_selection;
  if (in.weights_dtype) h.weights_dtype = ToElementType(*in.weights_dtype).value();
  h.head_stats = in.head_stats;
  h.head_mask = copy(in.head_mask);
  return h;
}

ForwardOutputs ToForwardOutputs(const HostOutputs& out) {
  ForwardOutputs f;
  f.output = ToTensor(out.output);
  f.attn_weights = ToTensor(out.attn_weights);
  f.topk_values = ToTensor(out.topk_values);
  f.topk_indices = ToTensor(out.topk_indices);
  f.head_entropy = ToTensor(out.head_entropy);
  f.head_max_weight = ToTensor(out.head_max_weight);
  return f;
}

std::vector<std::string> TestDevices() {
  std::vector<std::string> devices = {"cpu"};
  if (at::hasCUDA()) devices.push_back("cuda");
  return devices;
}

double MaxAbsDiff(const at::Tensor& actual, const at::Tensor& expected) {
  if (!actual.defined() || !expected.defined() || !SameShape(actual, expected)) {
    return std::numeric_limits<double>::infinity();
  }
  at::Tensor a = AsDouble(actual), e = AsDouble(expected);
  if (!at::equal(at::isnan(a), at::isnan(e))) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0.0;
  at::Tensor finite = ~at::isnan(e);
  return (a - e).abs().masked_select(finite).max().item<double>();
}

double RelativeError(const at::Tensor& actual, const at::Tensor& expected) {
  if (!actual.defined() || !expected.defined() || !SameShape(actual, expected)) {
    return std::numeric_limits<double>::infinity();
  }
  at::Tensor a = AsDouble(actual), e = AsDouble(expected);
  if (a.numel() == 0) return 0.0;
  return ((a - e).norm() / e.norm().clamp_min(1e-30)).item<double>();
}

::testing::AssertionResult TensorsNear(const at::Tensor& actual, const at::Tensor& expected,
                                       double atol) {
  if (!actual.defined() || !expected.defined()) {
    return ::testing::AssertionFailure() << "undefined tensor (actual defined: " << actual.defined()
                                         << ", expected defined: " << expected.defined() << ")";
  }
  if (!SameShape(actual, expected)) {
    return ::testing::AssertionFailure()
           << "shape " << ShapeString(actual) << " != expected " << ShapeString(expected);
  }
  const double diff = MaxAbsDiff(actual, expected);
  if (diff <= atol) return ::testing::AssertionSuccess() << "max abs diff " << diff;
  return ::testing::AssertionFailure()
         << "max abs diff " << diff << " > " << atol << " (shape " << ShapeString(actual) << ")";
}

std::string OipDatatype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "FP32";
    case at::kHalf:
      return "FP16";
    case at::kBFloat16:
      return "BF16";
    case at::kBool:
      return "BOOL";
    default:
      ADD_FAILURE() << "tensor of dtype " << c10::toString(type);
      return "";
  }
}

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/mha-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << pattern;
    return;
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string FixturePath(const std::string& relative) {
  return std::string(MHA_FIXTURES_DIR) + "/" + relative;
}

std::vector<std::string> FixtureCaseNames() {
  auto index = ReadJson(FixturePath("cases/index.json"));
  if (!index.ok()) return {};
  return index.value().at("cases").get<std::vector<std::string>>();
}

StatusOr<FixtureCase> LoadFixtureCase(const std::string& name) {
  FixtureCase c;
  c.name = name;
  c.dir = FixturePath("cases/" + name);
  auto meta = ReadJson(c.dir + "/case.json");
  if (!meta.ok()) return meta.status();
  c.meta = std::move(meta.value());
  c.weights_path = c.dir + "/" + c.meta.at("weights_file").get<std::string>();

  auto io = ReadSafetensors(c.dir + "/io.safetensors");
  if (!io.ok()) return io.status();
  auto get = [&](const char* key) {
    auto it = io->find(key);
    return it == io->end() ? at::Tensor() : it->second;
  };
  c.inputs.query = get("query");
  c.inputs.key = get("key");
  c.inputs.value = get("value");
  c.inputs.key_padding_mask = get("key_padding_mask");
  c.inputs.attn_mask = get("attn_mask");
  c.inputs.is_causal = c.meta.value("is_causal", false);
  c.inputs.need_weights = c.meta.value("need_weights", false);
  c.inputs.average_attn_weights = c.meta.value("average_attn_weights", true);
  c.expected_output = get("output");
  c.expected_weights = get("attn_weights");
  if (!c.inputs.query.defined() || !c.expected_output.defined()) {
    return InvalidArgument(c.dir + "/io.safetensors lacks query or output");
  }
  return c;
}

std::shared_ptr<MhaModel> LoadCaseModel(const FixtureCase& c, const std::string& device,
                                        DType dtype) {
  LoadOptions load;
  load.path = c.weights_path;
  load.device = device;
  load.dtype = dtype;
  auto loaded = LoadWeights(load);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (!loaded.ok()) return nullptr;
  auto model = MhaModel::Create(loaded->options, std::move(loaded->weights));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::shared_ptr<MhaModel>(std::move(model).value()) : nullptr;
}

}  // namespace mha::testing
