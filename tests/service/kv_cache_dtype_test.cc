// KV cache dtypes per model version against a real mha-server (docs/kv_cache_dtypes.md): each
// version's sessions store their cache as its config.json's kv_cache_dtype says, else as
// --kv-cache-dtype; a session stepped a token at a time on each version answers within that
// dtype's bound of PyTorch (fp32: 1e-5), one-layer and Llama (LayerSteps); the dtype and its bytes
// per token are shown by GetModel, `mha-client list`, the OIP model config's parameters and
// mha_kv_cache_bytes_per_token; an unknown dtype fails its version naming the key and the choices,
// fp8_e4m3 on the CPU fails saying why, and an unknown --kv-cache-dtype exits with code 2.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "afd_test_util.h"
#include "inference/grpc_service.grpc.pb.h"
#include "session_test_util.h"

namespace mha::testing {
namespace kv_cache_dtype_test {

// A step's norm-wise relative error against PyTorch, per dtype (the core's per-step bounds:
// decode_kv_dtype_test.cc, llama_step_kv_dtype_test.cc).
double Bound(const std::string& dtype) {
  if (dtype == "bf16") return 5e-3;
  if (dtype == "fp16") return 1e-3;
  if (dtype == "int8") return 2e-2;
  return 0;
}

// Runs `command` and returns its exit code; its output (stdout + stderr) into `out`.
int RunCommand(const std::string& command, std::string* out) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Model "m" (decode_causal_long, E=64 H=8 D=8) in versions 1 fp32, 2 (no key: the flag's bf16),
// 3 int8, 4 fp16, 5 an unknown dtype, 6 fp8_e4m3 (no float8 on a CPU).
void WriteRepository(const TempDir& repo) {
  WriteText(repo.File("m/config.json"), R"({"num_heads": 8, "version_policy": {"all": {}}})");
  const std::map<std::string, std::string> versions = {
      {"1", "fp32"}, {"2", ""}, {"3", "int8"}, {"4", "fp16"}, {"5", "int4"}, {"6", "fp8_e4m3"}};
  for (const auto& [version, dtype] : versions) {
    AddVersion(repo.path(), "m", version, "decode_causal_long");
    if (!dtype.empty()) {
      WriteText(repo.File("m/" + version + "/config.json"),
                R"({"kv_cache_dtype": ")" + dtype + R"("})");
    }
  }
}

std::map<std::string, v1::ModelInfo> VersionsOf(client::TensorClient& client) {
  std::map<std::string, v1::ModelInfo> versions;
  auto list = client.ListModels();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  if (list.ok()) {
    for (const auto& m : list->models()) versions[m.version()] = m;
  }
  return versions;
}

// Decodes the fixture's 40 tokens a step on `version`; every step within its dtype's bound.
void DecodeOn(client::TensorClient& client, const FixtureCase& c, const std::string& version,
              const std::string& dtype) {
  SCOPED_TRACE("version " + version + " (" + dtype + ")");
  client::SessionOpenOptions o;
  o.model = "m";
  o.model_version = version;
  o.batch_size = 2;
  auto opened = client.OpenSession(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const int64_t total = c.inputs.query.size(1);
  for (int64_t p = 0; p < total; ++p) {
    auto step = client.Step(opened->session_id(), StepOf(c.inputs, p, 1, p + 1));
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    const at::Tensor want = c.expected_output.narrow(1, p, 1);
    if (dtype == "fp32") {
      EXPECT_TRUE(TensorsNear(step->output, want, kFp32Tolerance)) << "token " << p;
    } else {
      EXPECT_LE(RelativeError(step->output, want), Bound(dtype)) << "token " << p;
    }
  }
  ASSERT_TRUE(client.CloseSession(opened->session_id()).ok());
}

TEST(KvCacheDtypeService, EachVersionStepsInItsDtypeAndShowsIt) {
  TempDir repo;
  WriteRepository(repo);
  ServerProcess server;
  const std::string port_file = server.work_dir() + "/metrics-port";
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--kv-cache-dtype", "bf16",
                            "--kv-block-tokens", "4", "--metrics-address", "127.0.0.1:0",
                            "--metrics-port-file", port_file}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto versions = VersionsOf(client);
  ASSERT_EQ(versions.size(), 6u);
  // D=8: 2 * 8 heads * 8 * 4 bytes in fp32; int8 adds 8 bytes of scales per head to its 8 codes.
  const std::map<std::string, std::pair<std::string, int64_t>> want = {
      {"1", {"fp32", 512}}, {"2", {"bf16", 256}}, {"3", {"int8", 256}}, {"4", {"fp16", 256}}};
  const FixtureCase c = Case("decode_causal_long");
  const int metrics = ReadPortFile(port_file);
  for (const auto& [version, kv] : want) {
    const v1::ModelInfo& m = versions[version];
    ASSERT_EQ(m.state(), v1::READY) << version << ": " << m.error();
    EXPECT_EQ(m.kv_cache_dtype(), kv.first) << version;
    EXPECT_EQ(m.kv_bytes_per_token(), kv.second) << version;
    EXPECT_EQ(ScrapeMetric(metrics,
                           "mha_kv_cache_bytes_per_token{model=\"m\",version=\"" + version + "\"}"),
              kv.second);
    DecodeOn(client, c, version, kv.first);
  }
  EXPECT_EQ(versions["5"].state(), v1::FAILED);
  EXPECT_TRUE(Contains(versions["5"].error(),
                       "m/5/config.json: 'kv_cache_dtype': unknown KV cache dtype 'int4' "
                       "(choices: model, fp32, bf16, fp16, int8, fp8_e4m3)"));
  EXPECT_EQ(versions["6"].state(), v1::FAILED);
  EXPECT_TRUE(Contains(versions["6"].error(), "m/6/config.json: 'kv_cache_dtype' fp8_e4m3 on cpu"));
  EXPECT_TRUE(Contains(versions["6"].error(), "float8"));

  std::string listed;
  ASSERT_EQ(
      RunCommand(std::string(paths::ClientBinary()) + " -a " + server.target() + " list", &listed),
      0)
      << listed;
  EXPECT_TRUE(Contains(listed, "kv_cache=int8 kv_bytes_per_token=256")) << listed;
  EXPECT_TRUE(Contains(listed, "kv_cache=fp32 kv_bytes_per_token=512")) << listed;

  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  inference::ModelConfigRequest request;
  request.set_name("m");
  request.set_version("3");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(stub->ModelConfig(&context, request, &config).ok());
  const auto& p = config.config().parameters();
  ASSERT_TRUE(p.count("kv_cache_dtype") && p.count("kv_bytes_per_token"));
  EXPECT_EQ(p.at("kv_cache_dtype").string_value(), "int8");
  EXPECT_EQ(p.at("kv_bytes_per_token").string_value(), "256");
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// The fixture's sessions 0..3 of the 4-layer stack (E=32 KV=2 D=8) through LayerSteps with an
// int8 cache (--kv-cache-dtype): each layer's input is the fixture's own residual stream, so each
// output shows only its cache's error, within int8's bound of PyTorch's forward.
TEST(KvCacheDtypeService, LlamaLayerStepsOverAnInt8CacheStayWithinItsBound) {
  AfdServer s;
  ASSERT_TRUE(s.Start({"--kv-cache-dtype", "int8"}));
  auto client = s.Client();
  const LlamaCase c = LoadLlamaCase("stack4_sessions");
  std::vector<std::string> ids;
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(OpenOn(*client, "llama"));
    inputs.push_back(c.Io("s" + std::to_string(i) + ".input"));
  }
  grpc::ClientContext context;
  auto stream = client->OpenLayerSteps(&context);
  for (int64_t p = 0; p < 24; ++p) {  // a token a message; the streams' residual, layer by layer
    std::vector<at::Tensor> x;
    for (const at::Tensor& in : inputs) x.push_back(in.narrow(0, p, 1));
    for (int64_t layer = 0; layer < 4; ++layer) {
      ASSERT_TRUE(stream->Write(StepMessage("p" + std::to_string(p), layer, ids, x)));
      v1::LayerStepResponse r;
      ASSERT_TRUE(stream->Read(&r));
      ASSERT_FALSE(r.has_error()) << r.error().message();
      for (int i = 0; i < 4; ++i) {
        const at::Tensor want =
            c.Io("s" + std::to_string(i) + ".output." + std::to_string(layer)).narrow(0, p, 1);
        EXPECT_LE(RelativeError(FromWire(r.outputs(i)), want), Bound("int8"))
            << "session " << i << " layer " << layer << " token " << p;
        x[static_cast<size_t>(i)] = x[static_cast<size_t>(i)] + want;
      }
    }
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(
      ScrapeMetric(s.metrics_port, "mha_kv_cache_bytes_per_token{model=\"llama\",version=\"1\"}"),
      2 * 2 * (8 + 8));
  EXPECT_EQ(s.server.Stop(), 0) << s.server.log();
}

TEST(KvCacheDtypeService, AnUnknownFlagValueExitsWithCode2NamingTheFlagAndTheChoices) {
  std::string out;
  EXPECT_EQ(RunCommand(std::string(paths::ServerBinary()) + " --kv-cache-dtype int4", &out), 2);
  EXPECT_TRUE(Contains(out,
                       "--kv-cache-dtype: unknown KV cache dtype 'int4' (choices: model, "
                       "fp32, bf16, fp16, int8, fp8_e4m3)"))
      << out;
}

}  // namespace kv_cache_dtype_test
}  // namespace mha::testing
