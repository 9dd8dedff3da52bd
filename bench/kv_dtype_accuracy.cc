// What each KV cache dtype (mha/kv_cache_dtype.h) costs in accuracy: the attention output's
// norm-wise relative error ||o - o_ref|| / ||o_ref||, largest absolute error and cosine against the
// same steps over a cache in the model's dtype (float32), for
//   (a) the PyTorch fixtures (tests/fixtures): the one-layer decode cases and every Llama case,
//       decoded a token a step (pages read in place), every output of every layer;
//   (b) sessions whose cached keys have outlier channels (tests/common/kv_outlier_workload.h) at
//       cache 512 and 4096, one-layer (E=512 H=8) and Llama (E=1024 H=16 KV=4).
// One markdown table on stdout (docs/sessions.md carries it). Usage:
//   mha_kv_accuracy [fixtures dir, default the source tree's tests/fixtures]
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv_outlier_workload.h"
#include "mha/decode.h"
#include "mha/engine.h"
#include "mha/llama_step.h"
#include "mha/loader.h"

namespace {

using mha::KvCacheDtype;
using mha::testing::OutputError;

const KvCacheDtype kDtypes[] = {KvCacheDtype::kBFloat16, KvCacheDtype::kFloat16,
                                KvCacheDtype::kInt8};

void Check(const mha::Status& s) { TORCH_CHECK(s.ok(), s.ToString()); }

// A one-layer decode fixture's query decoded a token a step over a cache in `dtype`: [B, T, E].
at::Tensor DecodeFixture(const mha::MhaModel& model, const at::Tensor& query, KvCacheDtype dtype) {
  auto pool = mha::KvBlockPool::Create(mha::KvPoolOptions{int64_t{4} << 20, 4, dtype}, model);
  Check(pool.status());
  mha::KvCache cache(*pool, query.size(0));
  std::vector<at::Tensor> outs;
  for (int64_t p = 0; p < query.size(1); ++p) {
    Check(cache.Reserve(1));
    mha::StepInputs in;
    in.query = query.narrow(1, p, 1);
    mha::ForwardOutputs out;
    Check(mha::DecodeStep(model, &cache, false, in, &out));
    outs.push_back(out.output);
  }
  return at::cat(outs, 1);
}

// A Llama fixture's input rows as sessions, every layer, a token a step: every output in order.
at::Tensor DecodeLlama(const mha::LlamaAttentionStack& stack, const at::Tensor& input,
                       KvCacheDtype dtype) {
  auto pool = stack.CreateKvPool(mha::KvPoolOptions{int64_t{4} << 20, 4, dtype});
  Check(pool.status());
  std::vector<at::Tensor> all;
  for (int64_t layer = 0; layer < stack.num_layers(); ++layer) {
    std::vector<std::unique_ptr<mha::KvCache>> caches;
    for (int64_t i = 0; i < input.size(0); ++i) {
      caches.push_back(std::make_unique<mha::KvCache>(*pool, 1));
    }
    for (int64_t p = 0; p < input.size(1); ++p) {
      std::vector<at::Tensor> outs(static_cast<size_t>(input.size(0)));
      std::vector<mha::LlamaStepItem> items;
      for (int64_t i = 0; i < input.size(0); ++i) {
        Check(caches[i]->Reserve(1));
        items.push_back({caches[i].get(), input[i].narrow(0, p, 1), &outs[i]});
      }
      Check(mha::LlamaLayerStep(stack, layer, items));
      all.insert(all.end(), outs.begin(), outs.end());
    }
  }
  return at::cat(all, 0);
}

void Row(const std::string& name, int64_t cache, KvCacheDtype dtype, int64_t bytes_per_token,
         const OutputError& e) {
  std::printf("| %s | %lld | %s | %lld | %.2e | %.2e | %.7f |\n", name.c_str(),
              static_cast<long long>(cache), mha::KvCacheDtypeName(dtype),
              static_cast<long long>(bytes_per_token), e.rel, e.max_abs, e.cosine);
}

// Every dtype's outputs against the float32 cache's; `bytes` gives a dtype's bytes per token.
void Rows(const std::string& name, int64_t cache,
          const std::function<at::Tensor(KvCacheDtype)>& run,
          const std::function<int64_t(KvCacheDtype)>& bytes) {
  const at::Tensor ref = run(KvCacheDtype::kFloat32);
  for (KvCacheDtype d : kDtypes) {
    Row(name, cache, d, bytes(d), mha::testing::CompareOutputs(run(d), ref));
  }
}

// A sessions fixture's per-session inputs (s0.input, s1.input, ...: [T_i, E]) cut to the
// shortest and stacked: [sessions, T, E].
at::Tensor SessionInputs(const mha::TensorMap& io) {
  std::vector<at::Tensor> rows;
  for (int i = 0; io.count("s" + std::to_string(i) + ".input"); ++i) {
    rows.push_back(io.at("s" + std::to_string(i) + ".input"));
  }
  TORCH_CHECK(!rows.empty(), "no session inputs");
  int64_t shortest = rows.front().size(0);
  for (const at::Tensor& r : rows) shortest = std::min(shortest, r.size(0));
  for (at::Tensor& r : rows) r = r.narrow(0, 0, shortest);
  return at::stack(rows);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  TORCH_CHECK(in.good(), "cannot open ", path);
  return nlohmann::json::parse(in);
}

void FixtureRows(const std::string& dir) {
  for (const char* name : {"decode_causal", "decode_causal_long"}) {
    const std::string folder = dir + "/cases/" + name;
    mha::LoadOptions o;
    o.path = folder + "/model.safetensors";
    o.device = "cpu";
    auto loaded = mha::LoadModel(o);
    Check(loaded.status());
    const at::Tensor query = mha::ReadSafetensors(folder + "/io.safetensors").value().at("query");
    const mha::MhaModel& model = *loaded->model;
    Rows(
        std::string("fixture ") + name, query.size(1),
        [&](KvCacheDtype d) { return DecodeFixture(model, query, d); },
        [&](KvCacheDtype d) {
          return mha::KvBlockPool::Create({int64_t{1} << 20, 4, d}, model)
              .value()
              ->bytes_per_token();
        });
  }
  const nlohmann::json index = ReadJson(dir + "/llama/index.json");
  for (const auto& kind : {"stateless", "sessions"}) {
    for (const std::string name : index.at(kind)) {
      mha::LlamaStackOptions o;
      o.path = dir + "/llama/" + name;
      o.device = "cpu";
      auto stack = mha::LlamaAttentionStack::Create(o);
      Check(stack.status());
      const auto io = mha::ReadSafetensors(o.path + "/io.safetensors").value();
      const at::Tensor input = io.count("input") ? io.at("input") : SessionInputs(io);
      Rows(
          "fixture llama " + name, input.size(1),
          [&](KvCacheDtype d) { return DecodeLlama(**stack, input, d); },
          [&](KvCacheDtype d) {
            return (*stack)->CreateKvPool({int64_t{1} << 20, 4, d}).value()->bytes_per_token();
          });
    }
  }
}

void OutlierRows() {
  using mha::testing::OutlierSource;
  const auto model = mha::testing::RandomMhaModel(512, 8, 1);
  const auto llama = mha::testing::RandomLlamaStack(1024, 16, 4, 2);
  for (OutlierSource source : {OutlierSource::kKeyChannels, OutlierSource::kHiddenStates}) {
    const std::string where =
        source == OutlierSource::kKeyChannels ? "key channels" : "hidden states";
    for (int64_t cache : {512, 4096}) {
      mha::testing::OutlierWorkload w;
      w.source = source;
      w.cache = cache;
      w.sessions = 4;
      w.steps = 4;
      Rows(
          "outliers in " + where + ", one-layer E=512 H=8", cache,
          [&](KvCacheDtype d) { return mha::testing::MhaOutlierOutputs(*model, d, w); },
          [&](KvCacheDtype d) {
            return mha::KvBlockPool::Create({int64_t{1} << 20, 16, d}, *model)
                .value()
                ->bytes_per_token();
          });
      Rows(
          "outliers in " + where + ", llama E=1024 H=16 KV=4", cache,
          [&](KvCacheDtype d) { return mha::testing::LlamaOutlierOutputs(llama, d, w); },
          [&](KvCacheDtype d) {
            return llama.stack->CreateKvPool({int64_t{1} << 20, 16, d}).value()->bytes_per_token();
          });
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fixtures = argc > 1 ? argv[1] : MHA_SOURCE_FIXTURES;
  std::printf(
      "| case | cache (tokens) | dtype | bytes/token/layer | rel err | max abs err | cosine |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  FixtureRows(fixtures);
  OutlierRows();
  return 0;
}
