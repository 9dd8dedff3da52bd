// Sessions that outlive their replica (docs/scale-out.md, the shared KV store): a real
// redis-server, Debian's nginx with the shipped consistent-hash config in front of real mha-server
// replicas started with --kv-store, sessions driven by client::DecodingSession through nginx, every
// answer compared with PyTorch's single-process reference of the fixture. A rolling restart of
// every replica (SIGTERM: each hands its sessions over) and a replica added (the moved sessions
// released on request) cost no step and replay nothing; a replica SIGKILLed costs, with
// write-behind, the tail of the last block per row (the step says how many tokens the restored
// session holds), without it a full replay as before (its record restored empty); Redis stopped and
// restarted mid-run costs no step, and the store catches up.
#include <gtest/gtest.h>
#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/decoding_session.h"
#include "client/tensor_client.h"
#include "nginx_process.h"
#include "redis_server.h"
#include "session_test_util.h"

namespace mha::testing {
namespace kv_store_test {

constexpr int64_t kBlockTokens = 4;

// One replica on a fixed port (a restart keeps its place on nginx's ring).
struct StoreReplica {
  std::unique_ptr<ModelRepositoryDir> repository =
      std::make_unique<ModelRepositoryDir>(std::vector<std::string>{"decode_causal"});
  std::unique_ptr<ServerProcess> server;
  int port = ServerProcess::PickFreePort();
  int metrics_port = 0;
  std::vector<std::string> flags;

  ::testing::AssertionResult Start() {
    server = std::make_unique<ServerProcess>();
    const std::string port_file = server->work_dir() + "/metrics-port";
    std::vector<std::string> args = flags;
    args.insert(args.end(),
                {"--model-repository", repository->path(), "--grpc-address",
                 "127.0.0.1:" + std::to_string(port), "--metrics-port-file", port_file,
                 "--kv-block-tokens", std::to_string(kBlockTokens), "--instances", "1"});
    auto started = server->Start(args);
    if (started) metrics_port = ReadPortFile(port_file);
    return started;
  }
  double Metric(const std::string& series) { return ScrapeMetric(metrics_port, series); }
  double Sessions() { return Metric("mha_sessions_open{model=\"decode_causal\",version=\"1\"}"); }
};

// What a run of sessions cost.
struct RunCost {
  int64_t failed = 0, resumes = 0, resyncs = 0, replayed = 0, max_replayed = 0;
};

class KvStoreScaleOut : public ::testing::Test {
 protected:
  void SetUp() override { c_ = Case("decode_causal"); }

  ::testing::AssertionResult StartAll(int replicas, std::vector<std::string> flags,
                                      RedisServerOptions redis = {}) {
    auto up = redis_.Start(redis);
    if (!up) return up;
    flags.insert(flags.end(),
                 {"--kv-store", redis_.url(), "--kv-store-lease-ms", "1500",
                  "--kv-store-handover-timeout-ms", "20000", "--grace-period-s", "20"});
    for (int i = 0; i < replicas; ++i) {
      auto added = AddReplica(flags);
      if (!added) return added;
    }
    auto proxied = nginx_.Start(Ports());
    if (!proxied) return proxied;
    client_ = std::make_unique<client::TensorClient>(
        client::ClientOptions{nginx_.target(), std::chrono::milliseconds(60000)});
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult AddReplica(const std::vector<std::string>& flags) {
    replicas_.push_back(std::make_unique<StoreReplica>());
    replicas_.back()->flags = flags;
    return replicas_.back()->Start();
  }
  std::vector<int> Ports() const {
    std::vector<int> ports;
    for (const auto& r : replicas_) ports.push_back(r->port);
    return ports;
  }
  // The replica holding the most sessions now.
  size_t Busiest() {
    size_t best = 0;
    for (size_t i = 1; i < replicas_.size(); ++i) {
      if (replicas_[i]->Sessions() > replicas_[best]->Sessions()) best = i;
    }
    return best;
  }

  // `n` sessions through nginx, each decoding the fixture's 12 tokens one per step, round robin;
  // `between(p)` runs before round p. Every answer is checked against the reference.
  RunCost Decode(int n, const std::function<void(int64_t)>& between) {
    std::vector<std::unique_ptr<client::DecodingSession>> sessions;
    client::DecodingSessionOptions options;
    options.max_attempts = 10;
    for (int i = 0; i < n; ++i) {
      v1::OpenSessionRequest open;
      open.set_model(c_.name);
      open.set_batch_size(c_.inputs.query.size(0));
      open.set_session_id("kv-" + std::to_string(i));
      auto s = client::DecodingSession::Open(client_.get(), open, options);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (!s.ok()) return RunCost{n, 0, 0, 0, 0};
      sessions.push_back(std::move(s.value()));
    }
    RunCost cost;
    for (int64_t p = 0; p < c_.inputs.query.size(1); ++p) {
      between(p);
      for (auto& s : sessions) cost.failed += StepExactly(*s, p) ? 0 : 1;
    }
    for (auto& s : sessions) {
      cost.resumes += s->stats().resumes;
      cost.resyncs += s->stats().resyncs;
      cost.replayed += s->stats().replayed_tokens;
      cost.max_replayed = std::max(cost.max_replayed, s->stats().replayed_tokens);
      EXPECT_TRUE(s->Close().ok()) << s->id();
    }
    return cost;
  }
  bool StepExactly(client::DecodingSession& s, int64_t p) {
    auto request = client::MakeForwardRequest(StepOf(c_.inputs, p, 1, p + 1), {});
    auto answer = s.Step(*request);
    EXPECT_TRUE(answer.ok()) << s.id() << " step " << p << ": " << answer.status().ToString();
    if (!answer.ok()) return false;
    auto result = client::ParseForwardResponse(*answer);
    const bool exact =
        result.ok() && TensorsNear(result->output, c_.expected_output.narrow(1, p, 1), 1e-5);
    EXPECT_TRUE(exact) << s.id() << " token " << p;
    return exact;
  }
  double Sum(const std::string& series) {
    double total = 0;
    for (auto& r : replicas_) {
      if (r->server && r->server->running()) total += r->Metric(series);
    }
    return total;
  }

  FixtureCase c_;
  RedisServer redis_;
  std::vector<std::unique_ptr<StoreReplica>> replicas_;
  Nginx nginx_;
  std::unique_ptr<client::TensorClient> client_;
};

TEST_F(KvStoreScaleOut, ARollingRestartOfEveryReplicaCostsNoStepAndReplaysNothing) {
  ASSERT_TRUE(StartAll(3, {}));
  const RunCost cost = Decode(32, [&](int64_t p) {
    if (p < 2 || p > 8 || p % 3 != 2) return;  // rounds 2, 5, 8: replicas 0, 1, 2
    StoreReplica& r = *replicas_[static_cast<size_t>(p / 3)];
    EXPECT_EQ(r.server->Stop(SIGTERM), 0) << r.server->log();
    ASSERT_TRUE(r.Start());
  });
  EXPECT_EQ(cost.failed, 0);
  EXPECT_EQ(cost.resumes, 0) << "no session was replayed from its start";
  EXPECT_EQ(cost.resyncs, 0);
  EXPECT_EQ(cost.replayed, 0) << "no token was sent twice";
}

TEST_F(KvStoreScaleOut, AReplicaAddedTakesItsSessionsOverWithNothingReplayed) {
  ASSERT_TRUE(StartAll(3, {}));
  const std::vector<std::string> flags = replicas_[0]->flags;
  double moved = -1;
  const RunCost cost = Decode(16, [&](int64_t p) {
    if (p == 4) {
      ASSERT_TRUE(AddReplica(flags));
      ASSERT_TRUE(nginx_.Reload(Ports()));
    }
    if (p == 11) moved = replicas_.back()->Sessions();
  });
  EXPECT_EQ(cost.failed, 0);
  EXPECT_EQ(cost.resumes, 0);
  EXPECT_EQ(cost.replayed, 0);
  EXPECT_EQ(replicas_.back()->Metric("mha_kv_store_handovers_total{direction=\"restored\"}"), moved)
      << "each session that moved to the new replica was restored there once";
  std::printf("sessions moved to the fourth replica, restored with nothing replayed: %g\n", moved);
}

TEST_F(KvStoreScaleOut, AReplicaKilledWithWriteBehindCostsAtMostOneBlockPerRow) {
  ASSERT_TRUE(StartAll(3, {"--kv-store-write-behind", "true"}));
  double held = -1;
  const RunCost cost = Decode(16, [&](int64_t p) {
    if (p != 7) return;  // 7 tokens: one full block written, 3 in the next
    const size_t victim = Busiest();
    held = replicas_[victim]->Sessions();
    EXPECT_EQ(replicas_[victim]->server->Stop(SIGKILL), 128 + SIGKILL);
  });
  EXPECT_EQ(cost.failed, 0);
  EXPECT_EQ(cost.resumes, 0) << "restored from the store, not replayed from the start";
  EXPECT_EQ(cost.resyncs, held);
  EXPECT_LE(cost.max_replayed, kBlockTokens) << "at most one block per row replayed";
  EXPECT_EQ(cost.replayed, held * 3) << "tokens 4..6 of each session the killed replica held";
  std::printf("replica killed with write-behind: %g sessions restored, %lld tokens replayed\n",
              held, static_cast<long long>(cost.replayed));
}

TEST_F(KvStoreScaleOut, AReplicaKilledWithoutWriteBehindIsAFullReplayAsBefore) {
  ASSERT_TRUE(StartAll(3, {}));
  double held = -1;
  const RunCost cost = Decode(16, [&](int64_t p) {
    if (p != 7) return;
    const size_t victim = Busiest();
    held = replicas_[victim]->Sessions();
    EXPECT_EQ(replicas_[victim]->server->Stop(SIGKILL), 128 + SIGKILL);
  });
  EXPECT_EQ(cost.failed, 0);
  // Nothing but its record was written: restored empty, the whole session replayed.
  EXPECT_EQ(cost.resumes + cost.resyncs, held);
  EXPECT_EQ(cost.replayed, held * 7);
}

TEST_F(KvStoreScaleOut, RedisStoppedAndRestartedMidRunCostsNoStep) {
  RedisServerOptions persistent;
  persistent.persistent = true;
  ASSERT_TRUE(StartAll(3, {"--kv-store-write-behind", "true"}, persistent));
  const RunCost cost = Decode(16, [&](int64_t p) {
    if (p == 3) redis_.Stop();  // local sessions keep serving; the writes fail, counted
    if (p == 6) {
      // Each replica finds out at its next lease renewal (a third of --kv-store-lease-ms).
      EXPECT_TRUE(
          WaitUntil([&] { return Sum("mha_kv_store_up") == 0; }, "every replica to see it"));
      EXPECT_TRUE(WaitUntil([&] { return Sum("mha_kv_store_write_failures_total") > 0; },
                            "the failed block writes counted"));
      ASSERT_TRUE(redis_.Restart());
      ASSERT_TRUE(WaitUntil(
          [&] {
            return Sum("mha_kv_store_up") == 3 && Sum("mha_kv_store_sessions_not_durable") == 0;
          },
          "every replica to catch up"));
    }
    if (p == 9) {  // a handover after the outage: the store has every session again
      StoreReplica& r = *replicas_[Busiest()];
      EXPECT_EQ(r.server->Stop(SIGTERM), 0) << r.server->log();
    }
  });
  EXPECT_EQ(cost.failed, 0);
  EXPECT_EQ(cost.resumes, 0);
  EXPECT_EQ(cost.replayed, 0);
}

}  // namespace kv_store_test
}  // namespace mha::testing
