// --model-control-mode poll against a real server and real files: versions appear, fail, and
// disappear under steady load from several clients with zero failed requests; a change that
// keeps size and mtime is still found (content hash).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>

#include <cstdio>

#include "lifecycle_util.h"

namespace mha::testing {
namespace repository_poll_test {

using namespace std::chrono_literals;

std::string StateOf(client::TensorClient& client, const std::string& model,
                    const std::string& version) {
  auto list = client.ListModels();
  if (!list.ok()) return list.status().ToString();
  for (const auto& m : list->models()) {
    if (m.name() == model && m.version() == version) return v1::ModelState_Name(m.state());
  }
  return "absent";
}

// Waits (bounded) until `model` version `version` is in `state` ("absent" = not listed).
::testing::AssertionResult WaitForState(client::TensorClient& client, const std::string& model,
                                        const std::string& version, const std::string& state) {
  return WaitUntil([&] { return StateOf(client, model, version) == state; },
                   model + " version " + version + " to be " + state, std::chrono::seconds(120),
                   20ms);
}

void Report(const char* what, const std::vector<Answer>& answers, size_t steady_from,
            size_t swap_from, size_t swap_to) {
  const auto steady = Latencies(answers, steady_from, swap_from);
  const auto swap = Latencies(answers, swap_from, swap_to);
  std::printf(
      "[swap figures] %s: %zu requests during the swap, %s; p99 %.2f ms during the swap "
      "vs %.2f ms steady (p50 %.2f vs %.2f)\n",
      what, swap.size(), Failures(answers, swap_from, swap_to).empty() ? "0 failed" : "FAILURES",
      Percentile(swap, 0.99), Percentile(steady, 0.99), Percentile(swap, 0.5),
      Percentile(steady, 0.5));
}

TEST(RepositoryPoll, VersionsComeFailAndGoUnderLoadWithoutFailedRequests) {
  TempDir repo;
  WriteText(repo.File("m/config.json"), R"({"num_heads": 4})");  // latest 1
  AddVersion(repo.path(), "m", "1", "self_basic");
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "poll",
                            "--repository-poll-secs", "0.2", "--grace-period-s", "120"}));
  client::TensorClient client({server.target(), 60s});
  SteadyLoad load(server.target(), "m", 4);
  ASSERT_TRUE(load.WaitForAnswers(0, 200));

  // v2 appears: requests move to it.
  size_t mark = load.count();
  AddVersion(repo.path(), "m", "2", "causal");
  const long first_v2 = load.WaitForVersion(mark, "2");
  ASSERT_GE(first_v2, 0) << "no answer from version 2\n" << server.log();
  ASSERT_TRUE(WaitForState(client, "m", "1", "absent"));  // v1 drained and unloaded
  size_t swapped = load.count();
  ASSERT_TRUE(load.WaitForAnswers(swapped, 100));
  Report("v1 -> v2", load.answers(), 0, mark, swapped);

  // A corrupt v3: FAILED, v2 keeps serving.
  AddCorruptVersion(repo.path(), "m", "3");
  ASSERT_TRUE(WaitForState(client, "m", "3", "FAILED"));
  mark = load.count();
  ASSERT_TRUE(load.WaitForAnswers(mark, 100));
  auto answers = load.answers();
  for (size_t i = mark; i < answers.size(); ++i) ASSERT_EQ(answers[i].version, "2") << i;
  EXPECT_EQ(StateOf(client, "m", "2"), "READY");

  // The bad rollout is removed, then v2 too: latest 1 of {1} is v1 again (rollback).
  std::filesystem::remove_all(repo.File("m/3"));
  ASSERT_TRUE(WaitForState(client, "m", "3", "absent"));
  mark = load.count();
  std::filesystem::remove_all(repo.File("m/2"));
  ASSERT_GE(load.WaitForVersion(mark, "1"), 0) << server.log();
  ASSERT_TRUE(WaitForState(client, "m", "2", "absent"));
  swapped = load.count();
  ASSERT_TRUE(load.WaitForAnswers(swapped, 100));
  Report("v2 -> v1 (rollback)", load.answers(), 0, mark, swapped);

  // The whole model folder goes: NOT_FOUND.
  load.Stop();
  EXPECT_EQ(Failures(load.answers()), "");
  std::filesystem::remove_all(repo.File("m"));
  ASSERT_TRUE(WaitForState(client, "m", "1", "absent"));
  auto gone = client.ForwardRaw(SelfAttentionRequest("m", 1, 4, 16));
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// Same size, same mtime, other bytes: found by the content hash, reloaded as version 1.
TEST(RepositoryPoll, AChangeKeepingSizeAndMtimeIsFound) {
  TempDir repo;
  const std::string weights = repo.File("m/model.safetensors");
  WriteText(repo.File("m/config.json"), R"({"num_heads": 4})");
  std::filesystem::copy_file(FixturePath("cases/self_basic/model.safetensors"), weights);
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--model-control-mode", "poll",
                            "--repository-poll-secs", "0.2"}));
  client::TensorClient client({server.target(), 60s});
  const v1::ForwardRequest request = SelfAttentionRequest("m", 1, 4, 16);
  auto before = client.ForwardRaw(request);
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  struct stat old_stat {};
  ASSERT_EQ(stat(weights.c_str(), &old_stat), 0);
  std::filesystem::copy_file(FixturePath("cases/causal/model.safetensors"), weights,
                             std::filesystem::copy_options::overwrite_existing);
  const utimbuf times{old_stat.st_atime, old_stat.st_mtime};
  ASSERT_EQ(utime(weights.c_str(), &times), 0);
  struct stat new_stat {};
  ASSERT_EQ(stat(weights.c_str(), &new_stat), 0);
  ASSERT_EQ(new_stat.st_size, old_stat.st_size);
  ASSERT_EQ(new_stat.st_mtime, old_stat.st_mtime);

  Status failed = Status::Ok();
  const auto changed = WaitUntil(
      [&] {
        auto now = client.ForwardRaw(request);
        if (!now.ok()) failed = now.status();
        EXPECT_EQ(now.ok() ? now->model_version() : "", "1");
        return !now.ok() || now->output().data() != before->output().data();
      },
      "the new weights to answer", kWaitTimeout, 20ms);
  ASSERT_TRUE(failed.ok()) << failed.ToString();
  EXPECT_TRUE(changed) << server.log();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace repository_poll_test
}  // namespace mha::testing
