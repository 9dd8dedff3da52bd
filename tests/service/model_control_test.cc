// Explicit model control (LoadModel / UnloadModel / RepositoryIndex) against a real server:
// mode none refuses, load/unload/reload under load with zero failed requests, unload drains,
// the admin token.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include "hold_gate.h"
#include "lifecycle_util.h"
#include "wait.h"

namespace mha::testing {
namespace model_control_test {

using namespace std::chrono_literals;

// Two models, "a" and "b" (E=16), both with versions 1 (flat layout for "b").
class ExplicitRepository {
 public:
  ExplicitRepository() {
    WriteText(repo_.File("a/config.json"), R"({"num_heads": 4})");
    AddVersion(repo_.path(), "a", "1", "self_basic");
    AddVersion(repo_.path(), "b", "1", "causal", /*with_config=*/true);
  }
  const std::string& path() const { return repo_.path(); }
  std::string File(const std::string& name) const { return repo_.File(name); }

 private:
  TempDir repo_;
};

std::string IndexText(client::TensorClient& client) {
  auto index = client.RepositoryIndex();
  if (!index.ok()) return index.status().ToString();
  std::string text;
  for (const auto& r : index->models()) {
    text += r.name() + ":" + r.version() + ":" + v1::ModelState_Name(r.state()) + ":" + r.reason() +
            ";";
  }
  return text;
}

TEST(ModelControl, ModeNoneRefusesTheControlCallsSayingHowToEnableThem) {
  ExplicitRepository repo;
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path()}));
  client::TensorClient client({server.target(), 60s});
  for (const Status& s :
       {client.LoadModel("a"), client.UnloadModel("a"), client.RepositoryIndex().status()}) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find("--model-control-mode explicit"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelControl, LoadModelLoadsUnloadUnloadsAndTheIndexShowsBoth) {
  ExplicitRepository repo;
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                            "--load-model", "a"}));
  client::TensorClient client({server.target(), 60s});
  EXPECT_EQ(IndexText(client), "a:1:READY:;b::MODEL_STATE_UNSPECIFIED:not loaded;");
  auto before = client.ForwardRaw(SelfAttentionRequest("b", 1, 4, 16));
  EXPECT_EQ(before.status().code(), StatusCode::kNotFound) << before.status().ToString();

  ASSERT_TRUE(client.LoadModel("b").ok());
  auto after = client.ForwardRaw(SelfAttentionRequest("b", 1, 4, 16));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->model_version(), "1");

  ASSERT_TRUE(client.UnloadModel("a").ok());
  auto gone = client.ForwardRaw(SelfAttentionRequest("a", 1, 4, 16));
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().ToString();
  EXPECT_EQ(IndexText(client), "a::MODEL_STATE_UNSPECIFIED:not loaded;b:1:READY:;");
  const Status twice = client.UnloadModel("a");
  EXPECT_EQ(twice.code(), StatusCode::kNotFound) << twice.ToString();
  EXPECT_NE(twice.message().find("model 'a' is not loaded"), std::string::npos);

  const Status missing = client.LoadModel("nope");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  const Status escape = client.LoadModel("../etc");
  EXPECT_EQ(escape.code(), StatusCode::kInvalidArgument) << escape.ToString();
  EXPECT_NE(escape.message().find("name:"), std::string::npos) << escape.ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// Reload under load: new version 2 takes over, a corrupt version 3 fails while 2 keeps serving,
// removing 3 and 2 rolls back to 1; traffic on "b" and on "a" never sees a failure.
TEST(ModelControl, ReloadUnderLoadSwapsVersionsWithoutFailedRequests) {
  ExplicitRepository repo;
  ServerProcess server;
  // A long grace period: the stop watchdog must not fire while a loaded box is still exiting.
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                            "--grace-period-s", "120"}));
  client::TensorClient client({server.target(), 120s});
  SteadyLoad on_a(server.target(), "a", 3);
  SteadyLoad on_b(server.target(), "b", 1);
  ASSERT_TRUE(on_a.WaitForAnswers(0, 20));

  AddVersion(repo.path(), "a", "2", "causal");
  size_t mark = on_a.count();
  ASSERT_TRUE(client.LoadModel("a").ok());
  EXPECT_GE(on_a.WaitForVersion(mark, "2"), 0) << "no answer from version 2";

  AddCorruptVersion(repo.path(), "a", "3");
  const Status corrupt = client.LoadModel("a");
  EXPECT_EQ(corrupt.code(), StatusCode::kFailedPrecondition) << corrupt.ToString();
  EXPECT_NE(corrupt.message().find("version 3 failed to load"), std::string::npos);
  auto info = client.GetModel("a");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->version(), "2");  // the newest READY version
  mark = on_a.count();
  ASSERT_TRUE(on_a.WaitForAnswers(mark, 20));
  auto answers = on_a.answers();
  for (size_t i = mark; i < answers.size(); ++i) EXPECT_EQ(answers[i].version, "2") << i;

  std::filesystem::remove_all(repo.File("a/3"));
  std::filesystem::remove_all(repo.File("a/2"));
  mark = on_a.count();
  ASSERT_TRUE(client.LoadModel("a").ok());  // latest 1 of {1}: rolled back
  EXPECT_GE(on_a.WaitForVersion(mark, "1"), 0);
  EXPECT_EQ(IndexText(client), "a:1:READY:;b:1:READY:;");
  on_a.Stop();
  on_b.Stop();
  EXPECT_EQ(Failures(on_a.answers()), "");
  EXPECT_EQ(Failures(on_b.answers()), "");
  EXPECT_GT(on_b.count(), 0u);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// The statuses of asynchronous calls as they come back.
class Statuses {
 public:
  void Add(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    statuses_.push_back(s);
    cv_.notify_all();
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_.size();
  }
  // Those that came within a minute, once there are `n`.
  std::vector<grpc::Status> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 60s, [&] { return statuses_.size() >= n; });
    return statuses_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<grpc::Status> statuses_;
};

// Waits (bounded) until a row of the index starts with `row` ("model:version:STATE").
::testing::AssertionResult WaitForIndexRow(client::TensorClient& client, const std::string& row) {
  return WaitUntil([&] { return IndexText(client).find(row) != std::string::npos; },
                   "the index row " + row);
}

// Every request accepted before UnloadModel is answered OK; new ones get NOT_FOUND. The passes
// wait at a hold gate until the unload is draining them.
TEST(ModelControl, UnloadDrainsAcceptedRequests) {
  ExplicitRepository repo;
  ServerProcess server;
  HoldGate gate;
  gate.Attach(&server);
  const std::string metrics_port_file = server.work_dir() + "/metrics-port";
  ASSERT_TRUE(
      server.Start(gate.Args({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                              "--batching", "off", "--workers", "1", "--metrics-address",
                              "127.0.0.1:0", "--metrics-port-file", metrics_port_file})));
  const int metrics_port = ReadPortFile(metrics_port_file);
  ASSERT_GT(metrics_port, 0);
  client::TensorClient client({server.target(), 120s});
  gate.Hold();
  constexpr int kCalls = 6;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::ForwardResponse> responses(kCalls);
  const v1::ForwardRequest request = SelfAttentionRequest("a", 1, 4, 16);
  Statuses statuses;
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    client.ForwardAsync(contexts.back().get(), &request, &responses[i], 120s,
                        [&](grpc::Status s) { statuses.Add(s); });
  }
  // Every call accepted before the unload: answered + in flight = all (answers read first, so a
  // call finishing between the two reads can only make the sum smaller). Passes are held.
  const std::string inflight = R"(mha_inflight_requests{model="a"})";
  double in_flight = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        const double done = static_cast<double>(statuses.size());
        in_flight = ScrapeMetric(metrics_port, inflight);
        return done + in_flight >= kCalls;
      },
      "every call answered or in flight"));
  ASSERT_GE(in_flight, 2) << "the calls were answered before the unload: nothing to drain";
  EXPECT_TRUE(gate.WaitEntered(1));
  // The unload waits for the held calls: the index shows the version UNLOADING meanwhile. Then
  // the passes are let through and the unload ends. (No ASSERT until the gate is open: the
  // future's destructor would wait for an unload that waits for the gate.)
  auto unloaded = std::async(std::launch::async, [&] { return client.UnloadModel("a"); });
  EXPECT_TRUE(WaitForIndexRow(client, "a:1:UNLOADING")) << IndexText(client);
  gate.ReleaseAll();
  ASSERT_TRUE(GetWithin(unloaded, "UnloadModel's answer").ok());
  EXPECT_EQ(ScrapeMetric(metrics_port, inflight), 0) << "UnloadModel answered before the drain";
  auto refused = client.ForwardRaw(request);
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound) << refused.status().ToString();
  const std::vector<grpc::Status> answers = statuses.WaitFor(kCalls);
  ASSERT_EQ(answers.size(), static_cast<size_t>(kCalls));
  for (const auto& s : answers) EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(ScrapeMetric(metrics_port, R"(mha_model_unloads_total{model="a"})"), 1);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelControl, AdminTokenGuardsControlCallsOnly) {
  ExplicitRepository repo;
  ServerProcess server;
  const std::string token_file = server.work_dir() + "/admin-token";
  WriteText(token_file, "s3cret-token\n");
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                            "--admin-token-file", token_file}));
  client::TensorClient anonymous({server.target(), 60s});
  const Status none = anonymous.RepositoryIndex().status();
  EXPECT_EQ(none.code(), StatusCode::kUnauthenticated) << none.ToString();
  EXPECT_NE(none.message().find("authorization: Bearer"), std::string::npos) << none.ToString();
  EXPECT_TRUE(anonymous.ForwardRaw(SelfAttentionRequest("a", 1, 4, 16)).ok());
  client::ClientOptions wrong_options{server.target(), 60s};
  wrong_options.admin_token = "guess";
  client::TensorClient wrong(wrong_options);
  EXPECT_EQ(wrong.UnloadModel("a").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(anonymous.ForwardRaw(SelfAttentionRequest("a", 1, 4, 16)).ok()) << "unloaded anyway";
  client::ClientOptions right_options{server.target(), 60s};
  right_options.admin_token = "s3cret-token";
  client::TensorClient right(right_options);
  EXPECT_TRUE(right.RepositoryIndex().ok());
  EXPECT_TRUE(right.LoadModel("a").ok());
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelControl, BadControlFlagsStopTheServerAtStart) {
  ExplicitRepository repo;
  ServerProcess server;
  ASSERT_FALSE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                             "--admin-token-file", server.work_dir() + "/missing"},
                            true, {}, 30s));
  EXPECT_NE(server.log().find("--admin-token-file"), std::string::npos) << server.log();
  ServerProcess unknown;
  ASSERT_FALSE(unknown.Start({"--model-repository", repo.path(), "--model-control-mode", "explicit",
                              "--load-model", "zzz"},
                             true, {}, 30s));
  EXPECT_NE(unknown.log().find("--load-model 'zzz' is not in the repository"), std::string::npos)
      << unknown.log();
}

}  // namespace model_control_test
}  // namespace mha::testing
