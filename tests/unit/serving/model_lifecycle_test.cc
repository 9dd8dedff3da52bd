// ModelLifecycle (lifecycle/model_lifecycle.h) on its own, with a handle factory whose schedulers
// are fakes: the start-up load publishes a handle per READY version; the control modes refuse or
// allow; an unload waits for the requests that hold the version and destroys its handle; a reload
// keeps the unchanged versions' handles and retires the changed one; Stop answers what is queued.
#include "server/serving/lifecycle/model_lifecycle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "metrics_text.h"
#include "test_util.h"
#include "wait.h"
#include "warmup_test_util.h"

namespace mha::serve {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Contains;

// A version's serving side that refuses every forward, offers no capability and counts its end
// (the handle's).
class FakeServed final : public ServedModel {
 public:
  explicit FakeServed(std::atomic<int>* shutdowns) : shutdowns_(shutdowns) {}
  ~FakeServed() override { Shutdown(); }
  void Shutdown() override {
    if (!down_.exchange(true)) ++*shutdowns_;
  }
  SchedulerView scheduling() const override { return {}; }
  Status ValidateForward(const InferenceRequest&) const override { return Refused(); }
  void Submit(InferenceTask task, DoneCallback done) override { Refuse(task, done, Refused()); }

 private:
  static Status Refused() { return Unavailable("fake scheduler"); }
  std::atomic<int>* const shutdowns_;
  std::atomic<bool> down_{false};
};

// The lifecycle over a repository folder: `enc` (versions 1 and 2, both served), `flat`, and
// `broken` (weights that are not weights).
class Fixture {
 public:
  explicit Fixture(ModelControlMode mode) {
    for (const char* v : {"1", "2"}) Weights(root() / "enc" / v);
    Write(root() / "enc" / "config.json", R"({"num_heads": 4, "version_policy": {"all": {}}})");
    Weights(root() / "flat");
    Write(root() / "flat" / "config.json", R"({"num_heads": 4})");
    fs::create_directories(root() / "broken");
    Write(root() / "broken" / "model.safetensors", "not weights");
    options_.model_repository = root().string();
    options_.model_control = mode;
    options_.load_threads = 2;
    auto entries = ScanRepository(options_.model_repository);
    EXPECT_TRUE(entries.ok()) << entries.status().ToString();
    lifecycle_ = std::make_unique<ModelLifecycle>(
        options_, &metrics_,
        [this](ModelEntry entry) {
          auto handle = std::make_shared<ModelHandle>();
          handle->entry = std::make_shared<const ModelEntry>(std::move(entry));
          handle->served = std::make_unique<FakeServed>(&shutdowns_);
          ++made_;
          return handle;
        },
        std::make_shared<const ModelRepository>(entries.ok() ? *entries : std::vector<ModelEntry>(),
                                                ""));
  }
  ModelLifecycle& lifecycle() { return *lifecycle_; }
  fs::path root() const { return dir_.path(); }
  int made() const { return made_; }
  const ServerCoreOptions& options() const { return options_; }
  int shutdowns() const { return shutdowns_; }
  std::string MetricsText() { return metrics_.Serialize(); }

  ::testing::AssertionResult Load() {
    std::promise<void> loaded;
    lifecycle_->StartLoading([&loaded] { loaded.set_value(); });
    if (loaded.get_future().wait_for(60s) == std::future_status::ready) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "the start-up load did not finish in 60 s";
  }
  // LoadModel or UnloadModel, waiting for the answer.
  Status Control(bool load, const std::string& name) {
    auto answer = std::make_shared<std::promise<Status>>();
    auto status = answer->get_future();
    auto done = [answer](Status s) { answer->set_value(std::move(s)); };
    load ? lifecycle_->LoadModel(name, done) : lifecycle_->UnloadModel(name, done);
    return testing::GetWithin(status, load ? "LoadModel's answer" : "UnloadModel's answer");
  }
  static void Write(const fs::path& path, const std::string& text) {
    std::ofstream(path.string()) << text;
  }

 private:
  static void Weights(const fs::path& dir) {
    fs::create_directories(dir);
    fs::copy_file(testing::FixturePath("cases/self_basic/model.safetensors"),
                  dir / "model.safetensors");
  }

  testing::TempDir dir_;
  ServerCoreOptions options_;
  Metrics metrics_{BuildInfo{"9.9.9", "1.13.1", "cpu"}};
  std::atomic<int> made_{0}, shutdowns_{0};
  std::unique_ptr<ModelLifecycle> lifecycle_;  // last: stopped before the rest goes
};

// `what` of the published state, once it holds (at most 60 s: the lifecycle publishes no event a
// test could wait on, and each look is a pointer copy).
template <typename Pred>
::testing::AssertionResult WaitForState(ModelLifecycle& lifecycle, Pred pred) {
  return testing::WaitUntil([&] { return pred(*lifecycle.Current()); }, "the published state",
                            testing::kWaitTimeout, 1ms);
}

std::string States(const ServingState& state) {
  std::string out;
  for (const auto& e : state.repository->entries()) {
    out += e->name + "/" + e->version + ":" + ModelStateName(e->state) + " ";
  }
  return out;
}

TEST(ModelLifecycleTest, StartUpLoadPublishesAHandlePerReadyVersion) {
  Fixture f(ModelControlMode::kNone);
  EXPECT_EQ(States(*f.lifecycle().Current()),
            "broken/1:LOADING enc/1:LOADING enc/2:LOADING flat/1:LOADING ");
  EXPECT_TRUE(f.lifecycle().Current()->handles.empty());
  ASSERT_TRUE(f.Load());
  const auto state = f.lifecycle().Current();
  EXPECT_EQ(States(*state), "broken/1:FAILED enc/1:READY enc/2:READY flat/1:READY ");
  ASSERT_EQ(state->handles.size(), 3u);
  EXPECT_EQ(f.made(), 3);
  for (const auto& [key, handle] : state->handles) {
    EXPECT_EQ(handle->entry->state, ModelState::kReady) << key.first;
    EXPECT_EQ(handle->entry->warmup_passes,
              testing::PlannedDefaultWarmupPasses(*handle->entry, f.options()))
        << key.first << ": the default warmup ran";
  }
  const std::string metrics = f.MetricsText();
  EXPECT_EQ(testing::SeriesValue(metrics, R"(mha_model_loaded{model="enc"})"), 1.0);
  EXPECT_EQ(testing::SeriesValue(metrics, R"(mha_model_loaded{model="broken"})"), 0.0);
}

TEST(ModelLifecycleTest, ControlModesRefuseOrAllow) {
  Fixture none(ModelControlMode::kNone);
  const Status off = none.Control(true, "enc");
  EXPECT_EQ(off.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(off.message(), "--model-control-mode none"));
  EXPECT_EQ(none.Control(false, "enc").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.lifecycle().RepositoryIndex().status().code(), StatusCode::kFailedPrecondition);
  Fixture poll(ModelControlMode::kPoll);
  const Status polled = poll.Control(true, "enc");
  EXPECT_EQ(polled.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(polled.message(), "--model-control-mode poll"));
  EXPECT_TRUE(poll.lifecycle().RepositoryIndex().ok());
  Fixture explicit_mode(ModelControlMode::kExplicit);
  for (const std::string& name :
       std::vector<std::string>{"", ".hidden", "../enc", "a/b", std::string(256, 'x')}) {
    EXPECT_EQ(explicit_mode.Control(true, name).code(), StatusCode::kInvalidArgument) << name;
  }
}

// A request in flight holds its version's handle: the unload shows the version UNLOADING and
// routes nothing to it at once, but answers only once the handle is let go, and then destroys it.
TEST(ModelLifecycleTest, UnloadWaitsForTheRequestsHoldingTheVersion) {
  Fixture f(ModelControlMode::kExplicit);
  ASSERT_TRUE(f.Load());
  std::shared_ptr<ModelHandle> in_flight = f.lifecycle().Current()->handles.at({"flat", "1"});
  std::promise<Status> unloaded;
  f.lifecycle().UnloadModel("flat", [&unloaded](Status s) { unloaded.set_value(s); });
  ASSERT_TRUE(WaitForState(f.lifecycle(), [](const ServingState& s) {
    const auto e = s.repository->Find("flat", "1");
    return e && e->state == ModelState::kUnloading && s.handles.count({"flat", "1"}) == 0;
  })) << States(*f.lifecycle().Current());
  auto answer = unloaded.get_future();
  EXPECT_NE(answer.wait_for(0s), std::future_status::ready) << "answered while a request holds it";
  EXPECT_EQ(f.shutdowns(), 0);
  in_flight.reset();
  EXPECT_TRUE(testing::GetWithin(answer, "the unload's answer").ok());
  EXPECT_EQ(f.shutdowns(), 1) << "the drained handle is destroyed";
  EXPECT_TRUE(f.lifecycle().Current()->repository->Versions("flat").empty());
  auto index = f.lifecycle().RepositoryIndex();
  ASSERT_TRUE(index.ok());
  bool listed = false;
  for (const auto& row : *index)
    listed = listed || (row.name == "flat" && row.reason == "not loaded");
  EXPECT_TRUE(listed) << "the folder is still there, not loaded";
  const Status again = f.Control(false, "flat");
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(again.message(), "is not loaded"));
  ASSERT_TRUE(f.Control(true, "flat").ok());
  EXPECT_EQ(f.lifecycle().Current()->handles.count({"flat", "1"}), 1u);
  EXPECT_EQ(f.made(), 4);
}

// A reload loads what changed beside what serves: the unchanged version keeps its handle, the
// changed one gets a new handle and the old one is destroyed before LoadModel answers.
TEST(ModelLifecycleTest, ReloadKeepsUnchangedVersionsAndRetiresChangedOnes) {
  Fixture f(ModelControlMode::kExplicit);
  ASSERT_TRUE(f.Load());
  std::weak_ptr<ModelHandle> v1, v2;
  {  // no handle may be held here while the reload drains
    const auto before = f.lifecycle().Current();
    v1 = before->handles.at({"enc", "1"});
    v2 = before->handles.at({"enc", "2"});
  }
  Fixture::Write(f.root() / "enc" / "2" / "config.json", R"({"max_queue_size": 5})");
  ASSERT_TRUE(f.Control(true, "enc").ok());
  const auto after = f.lifecycle().Current();
  EXPECT_EQ(States(*after), "broken/1:FAILED enc/1:READY enc/2:READY flat/1:READY ");
  EXPECT_EQ(after->handles.at({"enc", "1"}), v1.lock()) << "unchanged: the same handle";
  EXPECT_TRUE(v2.expired()) << "changed: the old handle was destroyed";
  EXPECT_EQ(after->handles.at({"enc", "2"})->entry->config.max_queue_size, 5u);
  EXPECT_EQ(f.made(), 4);
  EXPECT_EQ(f.shutdowns(), 1);
}

// Operations queued for the lifecycle thread (here it never starts: no StartLoading) are answered
// UNAVAILABLE by Stop; later ones are refused at once.
TEST(ModelLifecycleTest, StopAnswersQueuedOperations) {
  Fixture f(ModelControlMode::kExplicit);
  std::promise<Status> queued;
  f.lifecycle().LoadModel("enc", [&queued](Status s) { queued.set_value(s); });
  auto answer = queued.get_future();
  EXPECT_NE(answer.wait_for(0s), std::future_status::ready);
  f.lifecycle().Stop();
  ASSERT_EQ(answer.wait_for(0s), std::future_status::ready) << "Stop answers before it returns";
  const Status status = testing::GetWithin(answer, "the queued load's answer");
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(status.message(), "shutting down"));
  EXPECT_EQ(f.Control(true, "enc").code(), StatusCode::kUnavailable);
  f.lifecycle().Stop();  // idempotent
}

// mha_model_load_duration_seconds covers load and warmup: a version that loads but whose
// config.json warmup fails (self-attention passes on a kdim/vdim model) is observed once, as a
// failed load.
TEST(ModelLifecycleTest, TheLoadMetricsCoverTheWarmup) {
  Fixture f(ModelControlMode::kExplicit);
  ASSERT_TRUE(f.Load());
  const fs::path dir = f.root() / "warm_fails";
  fs::create_directories(dir);
  fs::copy_file(testing::FixturePath("cases/kdim_vdim/model.safetensors"),
                dir / "model.safetensors");
  Fixture::Write(dir / "config.json", R"({"num_heads": 4, "warmup": [{"batch": 1, "seq": 4}]})");
  const Status status = f.Control(true, "warm_fails");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "warmup[0]")) << status.ToString();
  const std::string metrics = f.MetricsText();
  EXPECT_EQ(testing::SeriesValue(metrics,
                                 R"(mha_model_loads_total{model="warm_fails",result="failure"})"),
            1.0);
  EXPECT_EQ(testing::SeriesValue(metrics,
                                 R"(mha_model_loads_total{model="warm_fails",result="success"})"),
            0.0);
  EXPECT_EQ(
      testing::SeriesValue(metrics, R"(mha_model_load_duration_seconds_count{model="warm_fails"})"),
      1.0);
}

}  // namespace
}  // namespace mha::serve
