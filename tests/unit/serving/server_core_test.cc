// ServerCore in-process: one scheduler per model handle, validation once at the edge (invalid
// requests never reach a scheduler), metrics recorded once per request, and the per-model
// scheduler keys of config.json (serving_config.h, on the one config.json reader,
// mha::ReadModelConfig).
#include "server/serving/server_core.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

#include "batch_test_util.h"
#include "metrics_text.h"
#include "mha/tensor_adapter.h"
#include "server/serving/repository/default_model.h"
#include "wait.h"
#include "warmup_test_util.h"

namespace mha::serve {
namespace server_core_test {

using testing::MakeGenerator;
using testing::MakeRequest;
using testing::TempDir;

BatcherOptions Defaults() {
  BatcherOptions o;
  o.max_batch_rows = 7;
  o.max_batch_tokens = 700;
  o.max_queue_delay_us = 70;
  o.max_queue_size = 17;
  o.instances = 1;
  return o;
}

std::string WriteConfig(const TempDir& dir, const std::string& json) {
  const std::string path = dir.path() + "/config.json";
  std::ofstream(path) << json;
  return path;
}

// A ServerCore over `o`, created and loaded (nullptr, with a test failure, when it cannot be
// created).
std::unique_ptr<ServerCore> LoadedCore(const ServerCoreOptions& o) {
  auto core = ServerCore::Create(o);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  if (!core.ok()) return nullptr;
  auto loaded = std::make_shared<std::promise<void>>();
  (*core)->StartLoading([loaded] { loaded->set_value(); });
  testing::GetWithin(loaded->get_future(), "the start-up load");
  return std::move(core).value();
}

StatusOr<BatcherOptions> ReadBatcherConfig(const std::string& path, const BatcherOptions& d) {
  if (path.empty()) return BatcherOptionsFor(ServingConfig(), d);
  auto config = ReadServingConfig(path);
  if (!config.ok()) return config.status();
  return BatcherOptionsFor(*config, d);
}

TEST(ModelConfigTest, MissingKeysKeepTheFlags) {
  auto none = ReadBatcherConfig("", Defaults());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->max_batch_rows, 7);
  EXPECT_EQ(ReadServingConfig("/nonexistent/config.json").status().code(), StatusCode::kNotFound);
  TempDir dir;
  auto other_keys = ReadBatcherConfig(WriteConfig(dir, R"({"num_heads": 4})"), Defaults());
  ASSERT_TRUE(other_keys.ok());
  EXPECT_EQ(other_keys->max_batch_tokens, 700);
  EXPECT_EQ(other_keys->instances, 1);
  EXPECT_EQ(other_keys->max_queue_size, 17u);
}

TEST(ModelConfigTest, KeysOverrideTheFlags) {
  TempDir dir;
  auto o = ReadBatcherConfig(WriteConfig(dir, R"({"num_heads": 4, "max_batch_rows": 32,
      "max_batch_tokens": 4096, "max_queue_delay_us": 0, "max_queue_size": 5, "instances": 3})"),
                             Defaults());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->max_batch_rows, 32);
  EXPECT_EQ(o->max_batch_tokens, 4096);
  EXPECT_EQ(o->max_queue_delay_us, 0);
  EXPECT_EQ(o->max_queue_size, 5u);
  EXPECT_EQ(o->instances, 3);
}

// max_batch_size, max_batch_rows' old name, still sets it; both, disagreeing, are refused.
TEST(ModelConfigTest, MaxBatchSizeIsTheDeprecatedNameOfMaxBatchRows) {
  TempDir dir;
  auto old = ReadBatcherConfig(WriteConfig(dir, R"({"max_batch_size": 24})"), Defaults());
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->max_batch_rows, 24);
  auto both = ReadServingConfig(WriteConfig(dir, R"({"max_batch_rows": 8, "max_batch_size": 24})"));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("max_batch_size 24 (deprecated) contradicts "
                                         "max_batch_rows 8"),
            std::string::npos)
      << both.status().message();
  auto same = ReadServingConfig(WriteConfig(dir, R"({"max_batch_rows": 8, "max_batch_size": 8})"));
  EXPECT_TRUE(same.ok());
}

TEST(ModelConfigTest, BadValuesNameTheFileAndKey) {
  TempDir dir;
  for (const char* json :
       {R"({"max_batch_size": 0})", R"({"max_batch_rows": 0})", R"({"max_batch_tokens": "big"})",
        R"({"max_queue_delay_us": -1})", R"({"instances": 1.5})", R"({"instances": 1000})",
        R"({"max_queue_size": 0})", R"({"instances": 1099511627776})", R"({"num_heads": true})",
        R"({"version": [1]})", R"([1, 2])"}) {
    const std::string path = WriteConfig(dir, json);
    auto o = ReadServingConfig(path);
    ASSERT_FALSE(o.ok()) << json;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(o.status().message().find(path), std::string::npos) << o.status().message();
  }
}

TEST(ModelConfigTest, UnknownKeysAreListed) {
  TempDir dir;
  auto o = ReadServingConfig(WriteConfig(dir, R"({"num_heads": 4, "num_hedas": 2, "version": 3})"));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->version, "3");
  ASSERT_EQ(o->unknown_keys.size(), 1u);
  EXPECT_EQ(o->unknown_keys[0], "num_hedas");
  // Core reads only its own keys and leaves the others (serving's, unknown ones) to the caller.
  EXPECT_EQ(o->model.num_heads, 4);
  EXPECT_EQ(o->model.other_keys, (std::vector<std::string>{"num_hedas", "version"}));
}

// A model folder whose config.json nests 100k objects deep ({"a": x 100000, 1, } x 100000: 600
// KB) is FAILED with the file and the depth named; the repository's other model loads. It once
// killed the server with SIGSEGV while loading the repository.
TEST(ModelConfigTest, HostileNestingFailsThatModelOnly) {
  TempDir dir;
  std::filesystem::create_directory_symlink(testing::FixturePath("cases/self_basic"),
                                            std::filesystem::path(dir.path()) / "good");
  const std::filesystem::path deep = std::filesystem::path(dir.path()) / "deep";
  std::filesystem::create_directory(deep);
  std::filesystem::copy_file(testing::FixturePath("cases/self_basic/model.safetensors"),
                             deep / "model.safetensors");
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "{\"a\":";
  text += "1" + std::string(100000, '}');
  std::ofstream((deep / "config.json").string()) << text;

  ServerCoreOptions o;
  o.model_repository = dir.path();
  o.batcher = Defaults();
  auto core = LoadedCore(o);
  ASSERT_NE(core, nullptr);
  auto repository = core->repository();
  EXPECT_EQ(repository->ready_count(), 1u);
  ASSERT_NE(repository->Find("good"), nullptr);
  EXPECT_EQ(repository->Find("good")->state, ModelState::kReady);
  auto failed = repository->Find("deep");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->state, ModelState::kFailed);
  EXPECT_NE(failed->error.find("config.json"), std::string::npos) << failed->error;
  EXPECT_NE(failed->error.find("deeper than 64 levels"), std::string::npos) << failed->error;
}

// A repository of fixture cases (symlinks) and a ServerCore over it, loaded.
class CoreFixture {
 public:
  explicit CoreFixture(const std::vector<std::string>& cases, bool batching = true,
                       RequestLimits limits = {}) {
    for (const auto& name : cases) {
      std::filesystem::create_directory_symlink(testing::FixturePath("cases/" + name),
                                                std::filesystem::path(dir_.path()) / name);
    }
    ServerCoreOptions o;
    o.model_repository = dir_.path();
    o.batching = batching;
    o.batcher = Defaults();
    o.batcher.max_queue_delay_us = 20000;  // let concurrent requests meet
    o.limits = limits;
    core_ = LoadedCore(o);
  }
  ServerCore& core() { return *core_; }

  // Infer, waiting for the answer.
  InferenceResponse Run(const std::string& model, ForwardInputs inputs) {
    InferenceRequest request;
    request.model = model;
    request.inputs = testing::ToHostInputs(inputs);
    auto answer = std::make_shared<std::promise<InferenceResponse>>();
    core_->Infer(std::move(request),
                 [answer](InferenceResponse r) { answer->set_value(std::move(r)); });
    return testing::GetWithin(answer->get_future(), "the answer of model '" + model + "'");
  }
  double Sample(const std::string& series) {  // -1 when absent
    return testing::SeriesValue(core_->metrics()->Serialize(), series).value_or(-1);
  }

 private:
  TempDir dir_;
  std::unique_ptr<ServerCore> core_;
};

// Every model is warm before health says SERVING. The built-in default model
// (no repository) and a model whose config.json has no "warmup" key run the default warmup (a
// cross-attention model with key and value of its kdim/vdim); "warmup": [] turns it off.
TEST(ServerCoreTest, EveryModelRunsItsWarmupBeforeItIsReady) {
  {
    ServerCoreOptions o;  // no repository: the built-in default model
    o.batcher = Defaults();
    auto core = LoadedCore(o);
    ASSERT_NE(core, nullptr);
    auto builtin = core->repository()->Find(kDefaultModelName);
    ASSERT_NE(builtin, nullptr);
    EXPECT_EQ(builtin->state, ModelState::kReady) << builtin->error;
    EXPECT_EQ(builtin->source, "builtin");
    EXPECT_EQ(builtin->warmup_passes, testing::PlannedDefaultWarmupPasses(*builtin, o));
    const std::string text = core->metrics()->Serialize();
    EXPECT_NE(text.find(R"(mha_model_loads_total{model="default",result="success"} 1)"),
              std::string::npos)
        << text;
    core->Stop();
  }
  TempDir dir;
  for (const char* name : {"self_basic", "kdim_vdim"}) {
    std::filesystem::create_directory_symlink(testing::FixturePath(std::string("cases/") + name),
                                              std::filesystem::path(dir.path()) / name);
  }
  const std::filesystem::path off = std::filesystem::path(dir.path()) / "off";
  std::filesystem::create_directory(off);
  std::filesystem::copy_file(testing::FixturePath("cases/self_basic/model.safetensors"),
                             off / "model.safetensors");
  std::ofstream((off / "config.json").string()) << R"({"num_heads": 4, "warmup": []})";
  ServerCoreOptions o;
  o.model_repository = dir.path();
  o.batcher = Defaults();
  auto core = LoadedCore(o);
  ASSERT_NE(core, nullptr);
  auto repository = core->repository();
  EXPECT_EQ(repository->ready_count(), 3u);
  EXPECT_EQ(repository->Find("self_basic")->warmup_passes,
            testing::PlannedDefaultWarmupPasses(*repository->Find("self_basic"), o));
  // kdim_vdim's default warmup passes key [1, 16, kdim] and value [1, 16, vdim].
  EXPECT_EQ(repository->Find("kdim_vdim")->warmup_passes,
            testing::PlannedDefaultWarmupPasses(*repository->Find("kdim_vdim"), o));
  EXPECT_EQ(repository->Find("off")->warmup_passes, 0);
  core->Stop();
}

// AnalyzeModel's answer is computed once per version and cached with its handle: a second call
// is a cache hit (no computation, the very same analysis object); another version computes.
TEST(ServerCoreTest, AnalysisIsComputedOncePerVersion) {
  CoreFixture f({"self_basic", "kdim_vdim"});
  EXPECT_EQ(f.core().analyses_computed(), 0);
  auto first = f.core().Analyze("self_basic", "");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_NE(first->analysis, nullptr);
  EXPECT_EQ(f.core().analyses_computed(), 1);
  auto again = f.core().Analyze("self_basic", "1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(f.core().analyses_computed(), 1);  // a cache hit
  EXPECT_EQ(again->analysis.get(), first->analysis.get());
  auto other = f.core().Analyze("kdim_vdim", "");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(f.core().analyses_computed(), 2);
  EXPECT_NE(other->analysis.get(), first->analysis.get());
  EXPECT_EQ(f.core().Analyze("nope", "").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.core().analyses_computed(), 2);
}

TEST(ServerCoreTest, RoutesEachModelToItsOwnSchedulerAndMatchesAlone) {
  for (bool batching : {true, false}) {
    CoreFixture f({"self_basic", "kdim_vdim"}, batching);
    auto repository = f.core().repository();
    ASSERT_EQ(repository->ready_count(), 2u);
    // The same fixtures loaded here: what each request alone must equal.
    auto self = testing::LoadFixtureModel("self_basic");
    auto cross = testing::LoadFixtureModel("kdim_vdim");
    ASSERT_TRUE(self && cross);
    auto gen = MakeGenerator(9);
    std::vector<std::promise<InferenceResponse>> answers(8);
    std::vector<ForwardInputs> requests;
    for (int i = 0; i < 8; ++i) {
      const auto& model = i % 2 ? cross : self;
      requests.push_back(MakeRequest(model->options(), {1, 3 + i, i % 2 ? 5 : 0}, gen));
      InferenceRequest request;
      request.model = i % 2 ? "kdim_vdim" : "self_basic";
      request.inputs = testing::ToHostInputs(requests.back());
      f.core().Infer(std::move(request),
                     [&answers, i](InferenceResponse r) { answers[i].set_value(std::move(r)); });
    }
    for (int i = 0; i < 8; ++i) {
      const InferenceResponse r =
          testing::GetWithin(answers[i].get_future(), "answer " + std::to_string(i));
      ASSERT_TRUE(r.status.ok()) << i << ": " << r.status.ToString();
      EXPECT_EQ(r.model, i % 2 ? "kdim_vdim" : "self_basic");
      ForwardOutputs alone;
      ASSERT_TRUE((i % 2 ? cross : self)->Forward(requests[i], &alone).ok());
      EXPECT_TRUE(testing::TensorsNear(ToTensor(r.outputs.output), alone.output, 1e-5)) << i;
    }
    f.core().Stop();
    EXPECT_EQ(f.Run("self_basic", requests[0]).status.code(), StatusCode::kUnavailable);
  }
}

TEST(ServerCoreTest, ValidatesOnceAndInvalidRequestsNeverReachAScheduler) {
  CoreFixture f({"self_basic"}, /*batching=*/true, RequestLimits{2, 8});
  ForwardInputs bad;
  bad.query = at::ones({1, 3, 8});  // E=8, the model has 16
  InferenceResponse r = f.Run("self_basic", bad);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("query"), std::string::npos) << r.status.message();
  ForwardInputs big;
  big.query = at::ones({3, 3, 16});
  r = f.Run("self_basic", big);
  EXPECT_EQ(r.status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status.message().find("--max-batch-size 2"), std::string::npos);
  big.query = at::ones({1, 9, 16});
  EXPECT_EQ(f.Run("self_basic", big).status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(f.Run("nope", big).status.code(), StatusCode::kNotFound);
  // None of them reached the batcher: no pass, no queue time; each was counted once.
  EXPECT_EQ(f.Sample(R"(mha_batch_size_count{model="self_basic"})"), 0);
  EXPECT_EQ(f.Sample(R"(mha_queue_duration_seconds_count{model="self_basic"})"), 0);
  EXPECT_EQ(f.Sample(R"(mha_requests_total{code="INVALID_ARGUMENT",model="self_basic"})"), 1);
  EXPECT_EQ(f.Sample(R"(mha_requests_total{code="RESOURCE_EXHAUSTED",model="self_basic"})"), 2);
  EXPECT_EQ(f.Sample(R"(mha_requests_total{code="NOT_FOUND",model="unknown"})"), 1);
}

TEST(ServerCoreTest, RecordsEachAnsweredRequestOnce) {
  CoreFixture f({"self_basic"});
  ForwardInputs good;
  good.query = at::ones({2, 5, 16});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.Run("", good).status.ok());  // "" = the only model
  EXPECT_EQ(f.Sample(R"(mha_requests_total{code="OK",model="self_basic"})"), 3);
  EXPECT_EQ(f.Sample(R"(mha_request_duration_seconds_count{model="self_basic"})"), 3);
  EXPECT_EQ(f.Sample(R"(mha_queue_duration_seconds_count{model="self_basic"})"), 3);
  EXPECT_EQ(f.Sample(R"(mha_compute_duration_seconds_count{model="self_basic"})"), 3);
  EXPECT_EQ(f.Sample(R"(mha_inflight_requests{model="self_basic"})"), 0);
  EXPECT_EQ(f.Sample(R"(mha_model_loaded{model="self_basic"})"), 1);
}

// The stage breakdown: every computed request's stages are counted once; refused ones are not;
// the stages before the answer fit in the time the server counts for the request (it stops the
// clock before the front end's respond stage).
TEST(ServerCoreTest, RecordsWhereEachComputedRequestSpendsItsTime) {
  CoreFixture f({"self_basic"});
  ForwardInputs good;
  good.query = at::ones({2, 5, 16});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.Run("", good).status.ok());
  ForwardInputs bad;
  bad.query = at::ones({2, 5, 15});  // wrong embed dim: refused by validation
  ASSERT_FALSE(f.Run("", bad).status.ok());
  EXPECT_EQ(f.Sample(R"(mha_staged_requests_total{model="self_basic"})"), 3);
  double staged_seconds = 0;
  for (const char* stage : {"decode", "queue", "merge", "forward", "split", "handoff", "respond"}) {
    const double v =
        f.Sample(std::string("mha_request_stage_seconds_total{model=\"self_basic\",stage=\"") +
                 stage + "\"}");
    EXPECT_GE(v, 0) << stage;
    if (std::string(stage) != "respond") staged_seconds += v;
  }
  EXPECT_GT(f.Sample(R"(mha_request_stage_seconds_total{model="self_basic",stage="forward"})"), 0);
  EXPECT_LE(staged_seconds,
            f.Sample(R"(mha_request_duration_seconds_sum{model="self_basic"})") + 3 * 2e-6)
      << "request durations are whole microseconds; the stages nanoseconds";
}

}  // namespace server_core_test
}  // namespace mha::serve
