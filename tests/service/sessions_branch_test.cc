// Branching sessions against a real mha-server (docs/sessions.md, "Fork, truncate and spill"):
// through the wire, a fork and a truncated session each equal the causal forward of their own
// sequence (the fixture's PyTorch rows, or the server's stateless causal forward of the branch,
// itself checked against PyTorch first); sessions spill under a pool a tenth of their needs with
// every answer exact and their files gone at shutdown; refusals (unknown or busy session, tokens
// below 0 or past the length, a taken id, an unwritable --kv-spill-dir) are precise.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "hold_gate.h"
#include "session_test_util.h"

namespace mha::testing {
namespace sessions_branch_test {

// Steps `id` with `tokens` [B, n, E] one token at a time: the outputs, concatenated.
at::Tensor StepEach(client::TensorClient& client, const std::string& id, const at::Tensor& tokens) {
  std::vector<at::Tensor> outs;
  for (int64_t p = 0; p < tokens.size(1); ++p) {
    ForwardInputs step;
    step.query = tokens.narrow(1, p, 1).contiguous();
    auto r = client.Step(id, step);
    EXPECT_TRUE(r.ok()) << "token " << p << ": " << r.status().ToString();
    if (!r.ok()) return at::Tensor();
    outs.push_back(r->output);
  }
  return at::cat(outs, 1);
}

// The server's stateless causal forward of `seq` (self-attention: key = value = query).
at::Tensor CausalForward(client::TensorClient& client, const at::Tensor& seq) {
  ForwardInputs in;
  in.query = in.key = in.value = seq;
  in.is_causal = true;
  client::ForwardOptions o;
  o.model = "decode_causal";
  auto r = client.Forward(in, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->output : at::Tensor();
}

TEST(SessionBranch, ForkAndTruncateThroughTheWireEqualEachBranchsCausalForward) {
  const FixtureCase c = Case("decode_causal");
  const at::Tensor x = c.inputs.query;  // [2, 12, 32]
  OwnServer s;
  ASSERT_TRUE(s.Start({}));
  auto client = s.Client();
  ASSERT_TRUE(TensorsNear(CausalForward(*client, x), c.expected_output, 1e-5)) << "the reference";
  const std::string a = OpenOn(*client, 2);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(TensorsNear(StepEach(*client, a, x.narrow(1, 0, 6)),
                          c.expected_output.narrow(1, 0, 6), 1e-5));
  auto fork = client->ForkSession(a, 5, "a.branch-1");
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_EQ(fork->session_id(), "a.branch-1");
  EXPECT_EQ(fork->model_version(), "1");
  EXPECT_EQ(fork->tokens(), 5);
  EXPECT_EQ(fork->kv_blocks(), 4);
  EXPECT_EQ(fork->kv_shared_blocks(), 4);
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 4) << "the fork takes no block until it writes";
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_shared"), 4);
  at::Tensor branch = x.clone();
  branch.narrow(1, 5, 7).copy_(x.narrow(1, 0, 7).flip(1) * 0.5);
  EXPECT_TRUE(TensorsNear(StepEach(*client, "a.branch-1", branch.narrow(1, 5, 7)),
                          CausalForward(*client, branch).narrow(1, 5, 7), 1e-5));
  EXPECT_EQ(s.Metric("mha_kv_cache_copies_on_write_total"), 2) << "one block per row";
  EXPECT_TRUE(TensorsNear(StepEach(*client, a, x.narrow(1, 6, 2)),
                          c.expected_output.narrow(1, 6, 2), 1e-5));
  auto cut = client->TruncateSession(a, 3);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->tokens(), 3);
  EXPECT_EQ(cut->kv_blocks(), 2);
  EXPECT_TRUE(TensorsNear(StepEach(*client, a, x.narrow(1, 3, 9)),
                          c.expected_output.narrow(1, 3, 9), 1e-5));
  // Refusals, each naming the field and the numbers.
  const Status unknown = client->ForkSession("s-none").status();
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(unknown.message(), "session 's-none' is unknown"));
  const Status below = client->TruncateSession(a, -1).status();
  EXPECT_EQ(below.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(below.message(), "tokens: -1 is below 0 (session '" + a + "' holds 12 tokens)"));
  const Status past = client->TruncateSession(a, 13).status();
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(past.message(), "tokens: 13 is past the session's length"));
  EXPECT_EQ(client->ForkSession(a, 0, "a.branch-1").status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(client->CloseSession(a).ok());
  ASSERT_TRUE(client->CloseSession("a.branch-1").ok());
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 0) << "every reference went back";
  EXPECT_EQ(s.server.Stop(), 0);
}

// A session with a step in a held pass (mha-test-server's hold gate) is busy: fork and truncate
// are FAILED_PRECONDITION until the step is answered.
TEST(SessionBranch, ForkOrTruncateOfABusySessionIsRefused) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  HoldGate gate;
  gate.Attach(&s.server);
  ASSERT_TRUE(s.Start(gate.Args({"--instances", "1"})));
  auto client = s.Client();
  const std::string a = OpenOn(*client, 2);
  ASSERT_FALSE(a.empty());
  gate.Hold();
  StatusOr<client::ForwardResult> held = Internal("not run");
  std::thread step([&] { held = client->Step(a, StepOf(c.inputs, 0, 2, 2)); });
  // No assertion may end the test before the join: the step's pass is let through first.
  EXPECT_TRUE(gate.WaitEntered(1));
  for (const Status& busy :
       {client->ForkSession(a).status(), client->TruncateSession(a, 0).status()}) {
    EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(busy.message(), "session '" + a + "' has a step queued or running"));
  }
  gate.ReleaseAll();
  step.join();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_TRUE(client->ForkSession(a).ok()) << "idle again";
  EXPECT_EQ(s.server.Stop(), 0);
}

// Ten sessions of B=2 x 12 tokens (6 KiB each) on a 6 KiB pool: each step spills the least
// recently used idle sessions and restores its own, and every answer equals the fixture's row.
// A CPU pool spills to files under --kv-spill-dir, a device pool to host memory (session_spill.cc).
TEST(SessionBranch, SpillUnderAPoolATenthOfTheSessionsNeedsKeepsEveryAnswerExact) {
  const FixtureCase c = Case("decode_causal");
  TempDir spill;
  OwnServer s;
  ASSERT_TRUE(s.Start({"--kv-cache-bytes", "6144", "--kv-cache-full-policy", "spill",
                       "--kv-spill-dir", spill.path()}));
  auto client = s.Client();
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    ids.push_back(OpenOn(*client, 2));
    ASSERT_FALSE(ids.back().empty());
  }
  for (int64_t p = 0; p < 12; ++p) {
    for (const std::string& id : ids) {
      auto r = client->Step(id, StepOf(c.inputs, p, 1, p + 1));
      ASSERT_TRUE(r.ok()) << id << " token " << p << ": " << r.status().ToString();
      EXPECT_TRUE(TensorsNear(r->output, c.expected_output.narrow(1, p, 1), 1e-5))
          << id << " token " << p;
    }
  }
  EXPECT_GT(s.Metric("mha_sessions_spilled"), 0);
  EXPECT_GT(s.Metric("mha_kv_spill_bytes"), 0);
  EXPECT_GT(ScrapeMetric(s.metrics_port, "mha_session_restores_total{model=\"decode_causal\"}"), 0);
  EXPECT_EQ(ScrapeMetric(s.metrics_port, "mha_session_evictions_total{model=\"decode_causal\"}"),
            0);
  const bool to_files = !at::hasCUDA();  // the server runs on the GPU where LibTorch sees one
  EXPECT_EQ(std::filesystem::is_empty(spill.path()), !to_files);
  ASSERT_TRUE(client->CloseSession(ids[0]).ok());
  EXPECT_EQ(s.server.Stop(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(spill.path())) << "shutdown removes the spill files";
}

TEST(SessionBranch, AnUnwritableSpillDirRefusesToStart) {
  TempDir dir;
  const std::string file = dir.File("not-a-dir");
  std::ofstream(file) << "x";
  OwnServer s;
  EXPECT_FALSE(s.Start({"--kv-cache-full-policy", "spill", "--kv-spill-dir", file + "/spill"}));
  EXPECT_EQ(s.server.WaitForExit(std::chrono::seconds(60)), 2);
  EXPECT_TRUE(Contains(s.server.log(), "--kv-spill-dir: spill dir " + file + "/spill"));
}

}  // namespace sessions_branch_test
}  // namespace mha::testing
