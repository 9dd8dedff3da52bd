// Helpers of the decoding-session service tests (sessions_test.cc, session_lifetime_test.cc):
// a fixture sequence cut into steps, the reference rows of a step, and a server of one's own.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lifecycle_util.h"
#include "service_test_util.h"

namespace mha::testing {

inline FixtureCase Case(const std::string& name) {
  auto c = LoadFixtureCase(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c.value() : FixtureCase();
}

// The step of tokens [p, p + n) of the fixture's request: new queries, masks over `keys` keys.
inline ForwardInputs StepOf(const ForwardInputs& full, int64_t p, int64_t n, int64_t keys) {
  ForwardInputs step;
  step.query = full.query.narrow(1, p, n).contiguous();
  if (full.key_padding_mask.defined()) {
    step.key_padding_mask = full.key_padding_mask.narrow(1, 0, keys).contiguous();
  }
  if (full.attn_mask.defined()) {
    const int64_t d = full.attn_mask.dim();
    step.attn_mask = full.attn_mask.narrow(d - 2, p, n).narrow(d - 1, 0, keys).contiguous();
  }
  step.need_weights = full.need_weights;
  step.average_attn_weights = full.average_attn_weights;
  return step;
}

// Expected weights of rows [p, p + n): the first `keys` columns plus the `extra` appended ones.
inline at::Tensor ExpectedWeights(const at::Tensor& full, int64_t p, int64_t n, int64_t keys,
                                  int64_t extra) {
  at::Tensor rows = full.narrow(-2, p, n);
  at::Tensor cols = rows.narrow(-1, 0, keys);
  if (extra > 0) cols = at::cat({cols, rows.narrow(-1, full.size(-1) - extra, extra)}, -1);
  return cols;
}

inline int64_t ExtraKeys(const FixtureCase& c) {
  return (c.meta["expect"]["add_bias_kv"].get<bool>() ? 1 : 0) +
         (c.meta["expect"]["add_zero_attn"].get<bool>() ? 1 : 0);
}

// Server-wide flags of one test: its own server, repository and metrics port.
struct OwnServer {
  std::unique_ptr<ModelRepositoryDir> repository;
  ServerProcess server;
  int metrics_port = 0;

  ::testing::AssertionResult Start(std::vector<std::string> args) {
    repository = std::make_unique<ModelRepositoryDir>(std::vector<std::string>{"decode_causal"});
    const std::string port_file = server.work_dir() + "/metrics-port";
    args.insert(args.end(),
                {"--model-repository", repository->path(), "--metrics-address", "127.0.0.1:0",
                 "--metrics-port-file", port_file, "--kv-block-tokens", "4"});
    auto started = server.Start(args);
    if (started) metrics_port = ReadPortFile(port_file);
    return started;
  }
  std::unique_ptr<client::TensorClient> Client() {
    return std::make_unique<client::TensorClient>(
        client::ClientOptions{server.target(), std::chrono::milliseconds(60000)});
  }
  double Metric(const std::string& name) {
    return ScrapeMetric(metrics_port, name + "{model=\"decode_causal\",version=\"1\"}");
  }
};

inline std::string OpenOn(client::TensorClient& client, int64_t batch, Status* status = nullptr) {
  client::SessionOpenOptions o;
  o.model = "decode_causal";
  o.batch_size = batch;
  auto opened = client.OpenSession(o);
  if (status) *status = opened.status();
  return opened.ok() ? opened->session_id() : "";
}

}  // namespace mha::testing
