// Weights loading: formats, layouts, prefixes, config.json and the errors for broken files.
#include "mha/loader.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "test_util.h"

namespace mha {
namespace loader_test {

namespace fs = std::filesystem;

using testing::Contains;
using testing::TempDir;

void CopyPrefix(const std::string& from, const std::string& to, size_t bytes) {
  std::ifstream in(from, std::ios::binary);
  std::string data(bytes, '\0');
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  std::ofstream(to, std::ios::binary).write(data.data(), in.gcount());
}

std::string CaseWeights(const std::string& name) {
  auto c = testing::LoadFixtureCase(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c->weights_path : "";
}

StatusOr<LoadedWeights> Load(const std::string& path, std::optional<int64_t> heads = 4,
                             const std::string& prefix = "") {
  LoadOptions options;
  options.path = path;
  options.num_heads = heads;
  options.prefix = prefix;
  return LoadWeights(options);
}

TEST(LoaderFixtures, EveryCaseLoadsWithTheExpectedOptions) {
  const std::vector<std::string> names = testing::FixtureCaseNames();
  ASSERT_FALSE(names.empty()) << "no fixture cases in " << testing::FixturePath("cases/index.json");
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    auto c = testing::LoadFixtureCase(name);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    LoadOptions options;
    options.path = c->weights_path;  // config.json beside it supplies num_heads and prefix
    auto loaded = LoadWeights(options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const nlohmann::json& expect = c->meta.at("expect");
    const MhaOptions& o = loaded->options;
    EXPECT_EQ(o.embed_dim, expect.at("embed_dim").get<int64_t>());
    EXPECT_EQ(o.num_heads, expect.at("num_heads").get<int64_t>());
    EXPECT_EQ(o.key_dim(), expect.at("kdim").get<int64_t>());
    EXPECT_EQ(o.value_dim(), expect.at("vdim").get<int64_t>());
    EXPECT_EQ(o.bias, expect.at("bias").get<bool>());
    EXPECT_EQ(o.add_bias_kv, expect.at("add_bias_kv").get<bool>());
    EXPECT_EQ(o.add_zero_attn, expect.at("add_zero_attn").get<bool>());
    EXPECT_EQ(WeightsFormatName(loaded->format), expect.at("format").get<std::string>());
    EXPECT_EQ(loaded->layout, expect.at("layout").get<std::string>());
    const MhaWeights& w = loaded->weights;
    const int64_t e = o.embed_dim;
    EXPECT_EQ(w.q_weight.sizes(), at::IntArrayRef({e, e}));
    EXPECT_EQ(w.k_weight.sizes(), at::IntArrayRef({e, o.key_dim()}));
    EXPECT_EQ(w.v_weight.sizes(), at::IntArrayRef({e, o.value_dim()}));
    EXPECT_EQ(w.out_weight.sizes(), at::IntArrayRef({e, e}));
    EXPECT_EQ(w.q_bias.defined(), o.bias);
    EXPECT_EQ(w.out_bias.defined(), o.bias);
    EXPECT_EQ(w.bias_k.defined(), o.add_bias_kv);
  }
}

// The three format cases hold the same weights: every reader must produce the same tensors.
TEST(LoaderFixtures, FormatsAgreeBitForBit) {
  auto st = Load(CaseWeights("format_safetensors"));
  auto ts = Load(CaseWeights("format_torch_save"));
  auto js = Load(CaseWeights("format_torchscript"));
  ASSERT_TRUE(st.ok() && ts.ok() && js.ok());
  for (const auto* other : {&ts.value(), &js.value()}) {
    EXPECT_TRUE(at::equal(st->weights.q_weight, other->weights.q_weight));
    EXPECT_TRUE(at::equal(st->weights.v_weight, other->weights.v_weight));
    EXPECT_TRUE(at::equal(st->weights.k_bias, other->weights.k_bias));
    EXPECT_TRUE(at::equal(st->weights.out_weight, other->weights.out_weight));
    EXPECT_TRUE(at::equal(st->weights.out_bias, other->weights.out_bias));
  }
}

TEST(LoaderFixtures, TorchScriptAttributesSupplyNumHeads) {
  TempDir dir;  // no config.json here
  fs::copy_file(CaseWeights("format_torchscript"), dir.File("model.pt"));
  auto loaded = Load(dir.File("model.pt"), std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->options.num_heads, 4);
  // Caller options win over the file's attributes.
  loaded = Load(dir.File("model.pt"), 2);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->options.num_heads, 2);
}

TEST(LoaderFixtures, BadFilesGiveClearErrors) {
  // Substrings each error must contain besides the file name.
  const std::map<std::string, std::vector<std::string>> expected = {
      {"wrong_shape", {"out_proj.weight", "[16, 17]", "[16, 16]"}},
      {"missing_key", {"out_proj.weight", "missing"}},
      {"heads_not_divisible", {"16", "num_heads 3"}},
      {"no_num_heads", {"num_heads unknown"}},
      {"not_weights", {"header length"}},
      {"bad_safetensors_header", {"JSON"}},
      {"offsets_out_of_range", {"out_proj.weight", "data_offsets"}},
  };
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(testing::FixturePath("bad"))) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const std::string weights = (entry.path() / "model.safetensors").string();
    ASSERT_TRUE(fs::exists(weights));
    LoadOptions options;
    options.path = weights;
    auto loaded = LoadWeights(options);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument) << loaded.status().ToString();
    EXPECT_TRUE(Contains(loaded.status().message(), weights));
    auto it = expected.find(name);
    if (it == expected.end()) continue;
    ++seen;
    for (const std::string& part : it->second) {
      EXPECT_TRUE(Contains(loaded.status().message(), part));
    }
  }
  EXPECT_EQ(seen, static_cast<int>(expected.size())) << "bad fixtures missing";
}

TEST(LoaderFixtures, TruncatedFilesFailCleanly) {
  TempDir dir;
  for (const char* name : {"format_safetensors", "format_torch_save", "format_torchscript"}) {
    const std::string source = CaseWeights(name);
    const size_t size = fs::file_size(source);
    for (size_t cut :
         {size_t{0}, size_t{5}, size_t{64}, size / 3, size / 2, size - 100, size - 1}) {
      SCOPED_TRACE(std::string(name) + " cut at " + std::to_string(cut));
      const std::string copy = dir.File(std::string(name) + "_" + std::to_string(cut) + ".bin");
      CopyPrefix(source, copy, cut);
      auto loaded = Load(copy);
      ASSERT_FALSE(loaded.ok());
      EXPECT_TRUE(Contains(loaded.status().message(), copy));
    }
  }
}

TEST(WeightsFormat, DetectionIgnoresTheExtension) {
  TempDir dir;
  const std::pair<const char*, WeightsFormat> cases[] = {
      {"format_safetensors", WeightsFormat::kSafetensors},
      {"format_torch_save", WeightsFormat::kTorchSave},
      {"format_torchscript", WeightsFormat::kTorchScript}};
  for (const auto& [name, format] : cases) {
    for (const char* file : {"x.pt", "x.safetensors", "x.bin"}) {
      const std::string copy = dir.File(std::string(name) + file);
      fs::copy_file(CaseWeights(name), copy);
      auto detected = DetectWeightsFormat(copy);
      ASSERT_TRUE(detected.ok()) << detected.status().ToString();
      EXPECT_EQ(detected.value(), format) << copy;
      auto loaded = Load(copy);
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_EQ(loaded->format, format);
    }
  }
  EXPECT_STREQ(WeightsFormatName(WeightsFormat::kTorchSave), "torch_save");
}

// Two packed layers in one file, as a TransformerEncoder checkpoint holds them.
TensorMap TwoLayers(int64_t e) {
  TensorMap t;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "enc.layers." + std::to_string(layer) + ".attn.";
    t[p + "in_proj_weight"] = at::full({3 * e, e}, layer + 1.0);
    t[p + "in_proj_bias"] = at::zeros({3 * e});
    t[p + "out_proj.weight"] = at::eye(e);
    t[p + "out_proj.bias"] = at::zeros({e});
  }
  t["enc.norm.weight"] = at::ones({e});
  return t;
}

TEST(LoaderPrefix, WithAndWithoutTrailingDot) {
  TempDir dir;
  const std::string path = dir.File("ckpt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, TwoLayers(8)).ok());
  for (const char* prefix : {"enc.layers.1.attn", "enc.layers.1.attn."}) {
    auto loaded = Load(path, 2, prefix);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->layout, "packed");
    EXPECT_EQ(loaded->options.embed_dim, 8);
    EXPECT_EQ(loaded->weights.q_weight[0][0].item<float>(), 2.0f);
    EXPECT_TRUE(loaded->unused_keys.empty());
  }
  auto wrong = Load(path, 2, "decoder.layers.0");
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Contains(wrong.status().message(), "'decoder.layers.0.'"));
  EXPECT_TRUE(Contains(wrong.status().message(), "enc.layers.0.attn.in_proj_bias"));
  auto none = Load(path, 2);  // no prefix: layout unknown, with a hint
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "did you mean prefix 'enc.layers."));
}

TEST(LoaderLayouts, UnknownLayoutListsKeys) {
  TempDir dir;
  const std::string path = dir.File("odd.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"foo.weight", at::ones({2, 2})}, {"bar", at::ones(2)}}).ok());
  auto loaded = Load(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(loaded.status().message(), path));
  EXPECT_TRUE(Contains(loaded.status().message(), "'foo.weight'"));
  EXPECT_TRUE(Contains(loaded.status().message(), "'bar'"));
}

TEST(LoaderLayouts, PartialBiasesBecomeZerosAndDoublesBecomeFloat) {
  TempDir dir;
  const std::string path = dir.File("fused.safetensors");
  TensorMap t = {{"qkv.weight", at::randn({24, 8}, at::kDouble)},
                 {"proj.weight", at::randn({8, 8})},
                 {"proj.bias", at::randn({8})},
                 {"extra", at::ones(1)}};
  ASSERT_TRUE(WriteSafetensors(path, t).ok());
  auto loaded = Load(path, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->layout, "fused_qkv");
  EXPECT_TRUE(loaded->options.bias);
  EXPECT_EQ(loaded->weights.k_weight.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(loaded->weights.k_bias, at::zeros({8})));
  EXPECT_TRUE(
      at::allclose(loaded->weights.v_weight, t["qkv.weight"].narrow(0, 16, 8).to(at::kFloat)));
  EXPECT_EQ(loaded->unused_keys, std::vector<std::string>{"extra"});
}

TEST(LoaderLayouts, KdimVdimAndShapeErrors) {
  TempDir dir;
  const std::string path = dir.File("hf.safetensors");
  TensorMap t = {{"q_proj.weight", at::randn({8, 8})},
                 {"k_proj.weight", at::randn({8, 6})},
                 {"v_proj.weight", at::randn({8, 10})},
                 {"out_proj.weight", at::randn({8, 8})}};
  ASSERT_TRUE(WriteSafetensors(path, t).ok());
  auto loaded = Load(path, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->options.key_dim(), 6);
  EXPECT_EQ(loaded->options.value_dim(), 10);
  EXPECT_FALSE(loaded->options.bias);

  t["out_proj.weight"] = at::randn({8, 9});
  t["bias_k"] = at::randn({1, 1, 8});
  ASSERT_TRUE(WriteSafetensors(path, t).ok());
  loaded = Load(path, 2);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(),
                       "key 'out_proj.weight' has shape [8, 9], expected [8, 8]"));
  t["out_proj.weight"] = at::randn({8, 8});
  ASSERT_TRUE(WriteSafetensors(path, t).ok());
  loaded = Load(path, 2);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(), "'bias_v' missing"));
  t.erase("bias_k");
  t["q_proj.weight"] = at::ones({8, 8}, at::kLong);
  ASSERT_TRUE(WriteSafetensors(path, t).ok());
  loaded = Load(path, 2);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(), "floating point"));
}

TEST(LoaderConfig, CallerBeatsConfigBeatsFile) {
  TempDir dir;
  const std::string path = dir.File("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"in_proj_weight", at::randn({24, 8}).to(at::kHalf)},
                                      {"out_proj.weight", at::randn({8, 8}).to(at::kHalf)}})
                  .ok());
  auto loaded = Load(path, std::nullopt);  // no config.json yet
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(), path + ": num_heads unknown"));
  loaded = Load(path, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->options.dtype, DType::kFloat16);  // as stored when nobody says otherwise
  EXPECT_EQ(loaded->options.device, "auto");

  std::ofstream(dir.File("config.json"))
      << R"({"num_heads": 2, "add_zero_attn": true, "dtype": "bf16", "device": "cpu",
            "embed_dim": 8, "comment": "ignored"})";
  loaded = Load(path, std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->options.num_heads, 2);
  EXPECT_TRUE(loaded->options.add_zero_attn);
  EXPECT_EQ(loaded->options.dtype, DType::kBFloat16);
  EXPECT_EQ(loaded->options.device, "cpu");
  EXPECT_FALSE(loaded->options.bias);

  LoadOptions options;
  options.path = path;
  options.num_heads = 4;
  options.add_zero_attn = false;
  options.dtype = DType::kFloat32;
  options.device = "cuda:1";
  loaded = LoadWeights(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->options.num_heads, 4);
  EXPECT_FALSE(loaded->options.add_zero_attn);
  EXPECT_EQ(loaded->options.dtype, DType::kFloat32);
  EXPECT_EQ(loaded->options.device, "cuda:1");

  std::ofstream(dir.File("other.json")) << R"({"num_heads": "2"})";
  options = LoadOptions();
  options.path = path;
  options.config_path = dir.File("other.json");  // an explicit config replaces config.json
  loaded = LoadWeights(options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(), "other.json: 'num_heads' must be an integer"));
  std::ofstream(dir.File("other.json")) << R"({"num_heads": 2, "embed_dim": 16})";
  loaded = LoadWeights(options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(), "'embed_dim' is 16 but the weights have 8"));
}

// JSON nesting is bounded before a tree is built (config.json and the safetensors header): 64
// levels pass the depth check, 65 are refused with the file and the limit named.
TEST(LoaderConfig, NestingDeeperThan64LevelsIsRefusedBeforeParsing) {
  auto nested = [](int depth) {
    std::string text;
    for (int i = 0; i < depth; ++i) text += "{\"a\":";
    return text + "1" + std::string(static_cast<size_t>(depth), '}');
  };
  std::istringstream ok_depth(nested(64));
  auto config = ParseModelConfig(ok_depth, "m/config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();  // "a" is not core's key, listed
  EXPECT_EQ(config->other_keys, std::vector<std::string>{"a"});
  std::istringstream too_deep(nested(65));
  config = ParseModelConfig(too_deep, "m/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "m/config.json: config nests objects/arrays deeper than 64 levels (refused before "
            "parsing)");
  std::istringstream brackets_in_strings("{\"num_heads\": 4, \"note\": \"" +
                                         std::string(1000, '[') + "\"}");
  EXPECT_TRUE(ParseModelConfig(brackets_in_strings, "m/config.json").ok());

  TempDir dir;
  const std::string header = "{\"w\":" + nested(70) + "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(dir.File("deep.safetensors"), std::ios::binary) << file << header;
  auto loaded = Load(dir.File("deep.safetensors"));
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(Contains(loaded.status().message(),
                       "safetensors header nests objects/arrays deeper than 64 levels"))
      << loaded.status().message();
}

}  // namespace loader_test
}  // namespace mha
