// The Open Inference Protocol's model repository extension and version routing on a real server:
// RepositoryIndex / RepositoryModelLoad / RepositoryModelUnload are the lifecycle's index, load
// and unload (same modes, same admin token); ModelInfer and ModelReady route by model_version;
// mha_protocol_requests_total tells the two front ends apart.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "inference/grpc_service.grpc.pb.h"
#include "lifecycle_util.h"

namespace mha::testing {
namespace oip_repository_test {

using namespace std::chrono_literals;
using Stub = inference::GRPCInferenceService::Stub;

// "a": versions 1 and 2 (policy all); "b": version 1.
class TwoModels {
 public:
  TwoModels() {
    WriteText(repo_.File("a/config.json"), R"({"num_heads": 4, "version_policy": {"all": {}}})");
    AddVersion(repo_.path(), "a", "1", "self_basic");
    AddVersion(repo_.path(), "a", "2", "self_basic");
    AddVersion(repo_.path(), "b", "1", "causal", /*with_config=*/true);
  }
  const std::string& path() const { return repo_.path(); }

 private:
  TempDir repo_;
};

std::unique_ptr<Stub> OipStub(const std::string& target) {
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

// A ModelInfer of `model` (self-attention, E=16, B=1, T=4) at `version`: the answering version,
// or "CODE: message".
std::string Infer(Stub& stub, const std::string& model, const std::string& version) {
  const v1::ForwardRequest forward = SelfAttentionRequest(model, 1, 4, 16);
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(version);
  auto* input = request.add_inputs();
  input->set_name("query");
  input->set_datatype("FP32");
  for (int64_t d : forward.query().shape()) input->add_shape(d);
  *request.add_raw_input_contents() = forward.query().data();
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  const grpc::Status s = stub.ModelInfer(&context, request, &response);
  if (!s.ok()) return std::to_string(s.error_code()) + ": " + s.error_message();
  return response.model_version();
}

std::string Index(Stub& stub, const std::string& token = "", bool ready = false) {
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  inference::RepositoryIndexRequest request;
  request.set_ready(ready);
  inference::RepositoryIndexResponse response;
  const grpc::Status s = stub.RepositoryIndex(&context, request, &response);
  if (!s.ok()) return std::to_string(s.error_code()) + ": " + s.error_message();
  std::string text;
  for (const auto& m : response.models()) {
    text += m.name() + ":" + m.version() + ":" + m.state() + ":" + m.reason() + ";";
  }
  return text;
}

grpc::Status Load(Stub& stub, const std::string& model, bool unload = false,
                  const std::string& token = "", const std::string& parameter = "") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 120s);
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  if (unload) {
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name(model);
    if (!parameter.empty()) (*request.mutable_parameters())[parameter].set_bool_param(true);
    inference::RepositoryModelUnloadResponse response;
    return stub.RepositoryModelUnload(&context, request, &response);
  }
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(model);
  if (!parameter.empty()) (*request.mutable_parameters())[parameter].set_string_param("{}");
  inference::RepositoryModelLoadResponse response;
  return stub.RepositoryModelLoad(&context, request, &response);
}

bool Ready(Stub& stub, const std::string& model, const std::string& version) {
  grpc::ClientContext context;
  inference::ModelReadyRequest request;
  request.set_name(model);
  request.set_version(version);
  inference::ModelReadyResponse response;
  return stub.ModelReady(&context, request, &response).ok() && response.ready();
}

TEST(OipRepository, LoadUnloadAndIndexAreTheLifecyclesAndInferRoutesByVersion) {
  TwoModels repo;
  ServerProcess server;
  const std::string metrics_port_file = server.work_dir() + "/metrics-port";
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                            "--load-model", "a", "--metrics-address", "127.0.0.1:0",
                            "--metrics-port-file", metrics_port_file}));
  auto stub = OipStub(server.target());
  EXPECT_EQ(Index(*stub), "a:1:READY:;a:2:READY:;b::UNAVAILABLE:not loaded;");
  EXPECT_EQ(Index(*stub, "", /*ready=*/true), "a:1:READY:;a:2:READY:;");

  EXPECT_EQ(Infer(*stub, "a", ""), "2");  // "" = the newest READY version
  EXPECT_EQ(Infer(*stub, "a", "1"), "1");
  const std::string missing = Infer(*stub, "a", "9");
  EXPECT_EQ(missing.rfind("5: ", 0), 0u) << missing;  // NOT_FOUND listing the versions
  EXPECT_NE(missing.find("version"), std::string::npos) << missing;
  EXPECT_TRUE(Ready(*stub, "a", "1"));
  EXPECT_FALSE(Ready(*stub, "a", "9"));
  EXPECT_FALSE(Ready(*stub, "b", ""));

  ASSERT_TRUE(Load(*stub, "b").ok());
  EXPECT_EQ(Infer(*stub, "b", ""), "1");
  EXPECT_TRUE(Ready(*stub, "b", ""));
  ASSERT_TRUE(Load(*stub, "a", /*unload=*/true, "", "unload_dependents").ok());
  EXPECT_EQ(Infer(*stub, "a", "").rfind("5: ", 0), 0u);
  EXPECT_EQ(Index(*stub), "a::UNAVAILABLE:not loaded;b:1:READY:;");
  EXPECT_EQ(Load(*stub, "a", /*unload=*/true).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Load(*stub, "nope").error_code(), grpc::StatusCode::NOT_FOUND);
  const grpc::Status overridden = Load(*stub, "a", false, "", "config");
  EXPECT_EQ(overridden.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(overridden.error_message().find("parameters: 'config'"), std::string::npos)
      << overridden.error_message();

  // 3 OK ModelInfer calls (a, a v1, b) and 2 NOT_FOUND (a v9, a unloaded) on OIP; one OK Forward
  // on mha.v1.
  client::TensorClient native({server.target(), 60s});
  ASSERT_TRUE(native.ForwardRaw(SelfAttentionRequest("b", 1, 4, 16)).ok());
  const int metrics_port = ReadPortFile(metrics_port_file);
  ASSERT_GT(metrics_port, 0);
  EXPECT_EQ(ScrapeMetric(metrics_port, R"(mha_protocol_requests_total{code="OK",protocol="oip"})"),
            3);
  EXPECT_EQ(
      ScrapeMetric(metrics_port, R"(mha_protocol_requests_total{code="NOT_FOUND",protocol="oip"})"),
      2);
  EXPECT_EQ(
      ScrapeMetric(metrics_port, R"(mha_protocol_requests_total{code="OK",protocol="mha.v1"})"), 1);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(OipRepository, ModeNoneIndexesTheLoadedVersionsAndRefusesLoadAndUnload) {
  TwoModels repo;
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path()}));
  auto stub = OipStub(server.target());
  EXPECT_EQ(Index(*stub), "a:1:READY:;a:2:READY:;b:1:READY:;");
  for (bool unload : {false, true}) {
    const grpc::Status s = Load(*stub, "b", unload);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_NE(s.error_message().find("--model-control-mode explicit"), std::string::npos)
        << s.error_message();
  }
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(OipRepository, TheAdminTokenGuardsTheRepositoryCallsAndNotInference) {
  TwoModels repo;
  ServerProcess server;
  const std::string token_file = server.work_dir() + "/admin-token";
  WriteText(token_file, "s3cret-token\n");
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                            "--admin-token-file", token_file}));
  auto stub = OipStub(server.target());
  EXPECT_EQ(Index(*stub).rfind("16: ", 0), 0u) << Index(*stub);  // UNAUTHENTICATED
  EXPECT_EQ(Load(*stub, "b", false, "guess").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Load(*stub, "b", true).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Infer(*stub, "b", ""), "1");  // inference needs no token
  EXPECT_TRUE(Load(*stub, "b", true, "s3cret-token").ok());
  EXPECT_EQ(Index(*stub, "s3cret-token"), "a:1:READY:;a:2:READY:;b::UNAVAILABLE:not loaded;");
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace oip_repository_test
}  // namespace mha::testing
