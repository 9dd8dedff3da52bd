// Helpers of the Llama service suites (llama_forward_test.cc, layer_steps_test.cc): a repository
// holding the Llama fixture folders beside a one-layer model, a server on it, float32 wire tensors
// of ATen tensors and back, and LayerSteps messages.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "client/mha_client.h"
#include "hold_gate.h"
#include "lifecycle_util.h"
#include "llama_test_util.h"
#include "metrics_scrape.h"
#include "server_process.h"
#include "test_util.h"

namespace mha::testing {

// DIR/llama -> llama/stack4_sessions (L=4 E=32 H=4 KV=2), DIR/gqa -> llama/gqa_ratio4 (L=2 E=64
// H=8 KV=2), DIR/mha -> cases/decode_causal (one nn.MultiheadAttention layer).
class AfdRepository {
 public:
  AfdRepository() {
    namespace fs = std::filesystem;
    fs::create_directory_symlink(FixturePath("llama/stack4_sessions"), dir_.File("llama"));
    fs::create_directory_symlink(FixturePath("llama/gqa_ratio4"), dir_.File("gqa"));
    fs::create_directory_symlink(FixturePath("cases/decode_causal"), dir_.File("mha"));
  }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
};

// A server over an AfdRepository (mha-test-server with a hold gate when `gate` is given), its
// metrics port read.
struct AfdServer {
  AfdRepository repository;
  ServerProcess server;
  int metrics_port = 0;

  ::testing::AssertionResult Start(std::vector<std::string> args, HoldGate* gate = nullptr) {
    const std::string port_file = server.work_dir() + "/metrics-port";
    args.insert(args.end(), {"--model-repository", repository.path(), "--default-model", "mha",
                             "--metrics-address", "127.0.0.1:0", "--metrics-port-file", port_file,
                             "--kv-block-tokens", "4", "--max-sequence-length", "512"});
    if (gate != nullptr) {
      gate->Attach(&server);
      args = gate->Args(args);
    }
    auto started = server.Start(args);
    if (started) metrics_port = ReadPortFile(port_file);
    return started;
  }
  std::unique_ptr<client::AttentionClient> Client() const {
    return std::make_unique<client::AttentionClient>(
        client::ClientOptions{server.target(), std::chrono::milliseconds(60000)});
  }
};

inline v1::Tensor Wire(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  v1::Tensor w;
  w.set_dtype(v1::FLOAT32);
  for (int64_t d : c.sizes()) w.add_shape(d);
  w.set_data(reinterpret_cast<const char*>(c.data_ptr<float>()),
             static_cast<size_t>(c.numel()) * sizeof(float));
  return w;
}

inline at::Tensor FromWire(const v1::Tensor& w) {
  EXPECT_EQ(w.dtype(), v1::FLOAT32);
  std::vector<int64_t> shape(w.shape().begin(), w.shape().end());
  at::Tensor t = at::empty(shape, at::kFloat);
  EXPECT_EQ(w.data().size(), static_cast<size_t>(t.numel()) * sizeof(float));
  if (w.data().size() == static_cast<size_t>(t.numel()) * sizeof(float)) {
    std::memcpy(t.data_ptr<float>(), w.data().data(), w.data().size());
  }
  return t;
}

inline std::string OpenOn(client::AttentionClient& client, const std::string& model,
                          int64_t max_tokens = 0, const std::string& id = "") {
  v1::OpenSessionRequest open;
  open.set_model(model);
  open.set_max_tokens(max_tokens);
  open.set_session_id(id);
  auto opened = client.OpenSession(open);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? opened->session_id() : "";
}

// A message of `layer` for sessions `ids` with their rows `hidden` ([t, E] each).
inline v1::LayerStepRequest StepMessage(const std::string& id, int64_t layer,
                                        const std::vector<std::string>& ids,
                                        const std::vector<at::Tensor>& hidden) {
  v1::LayerStepRequest r;
  r.set_id(id);
  r.set_layer(layer);
  for (size_t i = 0; i < ids.size(); ++i) {
    v1::LayerStepEntry* e = r.add_entries();
    e->set_session_id(ids[i]);
    *e->mutable_hidden() = Wire(hidden[i]);
  }
  return r;
}

}  // namespace mha::testing
