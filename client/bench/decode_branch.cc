#include "client/bench/decode_branch.h"

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/decoding_session.h"

namespace mha::client {
namespace {

// Opens a session of `max_tokens` and sends its prefill: its id, or "" with the error tallied.
std::string OpenAndPrefill(AttentionClient& client, const DecodeBenchOptions& o, int64_t e,
                           int64_t max_tokens, std::mt19937_64* rng, Tally* tally) {
  v1::OpenSessionRequest open;
  open.set_model(o.model);
  open.set_model_version(o.model_version);
  open.set_batch_size(o.batch);
  open.set_max_tokens(max_tokens);
  open.set_session_id(NewClientSessionId());
  auto opened = client.OpenSession(open, o.timeout);
  if (!opened.ok()) {
    tally->Error(opened.status());
    return "";
  }
  {
    std::lock_guard<std::mutex> lock(tally->mu);
    tally->kv_block_tokens = opened->kv_block_tokens();
  }
  if (o.prefill > 0) {
    v1::ForwardRequest step;
    step.set_session_id(opened->session_id());
    *step.mutable_query() = RandomQuery(o.batch, o.prefill, e, rng);
    if (auto r = client.ForwardRaw(step, o.timeout); !r.ok()) tally->Error(r.status());
  }
  return opened->session_id();
}

// Closes `id`, adding its blocks and tokens to the tally.
void CloseInto(AttentionClient& client, const std::string& id, const DecodeBenchOptions& o,
               Tally* tally) {
  auto closed = client.CloseSession(id);
  if (!closed.ok()) return tally->Error(closed.status());
  std::lock_guard<std::mutex> lock(tally->mu);
  tally->kv_blocks += closed->kv_blocks();
  tally->cached_tokens += closed->tokens() * o.batch;
}

}  // namespace

void RunForkedSession(AttentionClient& client, const DecodeBenchOptions& o, int64_t e, int index,
                      Tally* tally) {
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(index));
  const std::string source = OpenAndPrefill(client, o, e, o.prefill + o.tokens, &rng, tally);
  if (source.empty()) return;
  std::vector<std::string> forks;
  for (int f = 0; f < o.fork; ++f) {
    auto forked = client.ForkSession(source, 0);
    if (!forked.ok()) {
      tally->Error(forked.status());
      break;
    }
    forks.push_back(forked->session_id());
  }
  std::vector<std::thread> threads;
  for (size_t f = 0; f < forks.size(); ++f) {
    threads.emplace_back([&, f] {
      std::mt19937_64 mine_rng(rng() + f);
      StepSamples mine = tally->Samples();
      v1::ForwardRequest step;
      step.set_session_id(forks[f]);
      SetWeightsOptions(o, &step);
      for (int64_t i = 0; i < o.tokens; ++i) {
        *step.mutable_query() = RandomQuery(o.batch, 1, e, &mine_rng);
        const auto start = std::chrono::steady_clock::now();
        auto r = client.ForwardRaw(step, o.timeout);
        if (!r.ok()) {
          tally->Error(r.status());
          break;
        }
        mine.Add(start);
      }
      std::lock_guard<std::mutex> lock(tally->mu);
      tally->MergeLocked(mine);
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& id : forks) CloseInto(client, id, o, tally);
  CloseInto(client, source, o, tally);
}

void RunSpeculativeSession(AttentionClient& client, const DecodeBenchOptions& o, int64_t e,
                           int index, Tally* tally) {
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(index));
  const int64_t k = o.speculate;
  const std::string id = OpenAndPrefill(client, o, e, o.prefill + o.tokens * k, &rng, tally);
  if (id.empty()) return;
  std::uniform_int_distribution<int64_t> rejected(0, k);
  StepSamples mine = tally->Samples();
  v1::ForwardRequest step;
  step.set_session_id(id);
  SetWeightsOptions(o, &step);
  for (int64_t round = 0; round < o.tokens; ++round) {
    *step.mutable_query() = RandomQuery(o.batch, k, e, &rng);
    const auto start = std::chrono::steady_clock::now();
    auto r = client.ForwardRaw(step, o.timeout);
    if (!r.ok()) {
      tally->Error(r.status());
      break;
    }
    const int64_t back = rejected(rng);
    if (back > 0) {
      auto cut = client.TruncateSession(id, r->session_tokens() - back);
      if (!cut.ok()) {
        tally->Error(cut.status());
        break;
      }
    }
    mine.Add(start);
  }
  {
    std::lock_guard<std::mutex> lock(tally->mu);
    tally->MergeLocked(mine);
  }
  CloseInto(client, id, o, tally);
}

}  // namespace mha::client
