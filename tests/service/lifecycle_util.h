// Helpers of the model lifecycle tests: versioned repositories built from fixture cases, and a
// steady load of Forward calls that records every answer (code, version, latency).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "metrics_scrape.h"
#include "service_test_util.h"
#include "wait.h"

namespace mha::testing {

inline void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

// DIR/<model>/<version>/ holding the fixture case's weights file (and its config.json when
// with_config), staged under a hidden name and renamed in, so a poll never sees half a folder.
inline void AddVersion(const std::string& root, const std::string& model,
                       const std::string& version, const std::string& fixture_case,
                       bool with_config = false) {
  namespace fs = std::filesystem;
  const fs::path staging = fs::path(root) / model / (".staging-" + version);
  fs::create_directories(staging);
  for (const auto& item : fs::directory_iterator(FixturePath("cases/" + fixture_case))) {
    const std::string name = item.path().filename().string();
    if (name.rfind("model.", 0) == 0 || (with_config && name == "config.json")) {
      fs::copy_file(item.path(), staging / name, fs::copy_options::overwrite_existing);
    }
  }
  fs::rename(staging, fs::path(root) / model / version);
}

// A version folder whose weights are not weights: loading it fails.
inline void AddCorruptVersion(const std::string& root, const std::string& model,
                              const std::string& version) {
  namespace fs = std::filesystem;
  const fs::path staging = fs::path(root) / model / (".staging-" + version);
  WriteText(staging / "model.safetensors", "this is not a safetensors file");
  fs::rename(staging, fs::path(root) / model / version);
}

struct Answer {
  grpc::StatusCode code;
  std::string version;
  double ms;
};

// `threads` clients each sending Forward to `model` (E=16, B=1, T=4) back to back until Stop.
class SteadyLoad {
 public:
  SteadyLoad(const std::string& target, const std::string& model, int threads) {
    for (int i = 0; i < threads; ++i) {
      workers_.emplace_back([this, target, model] {
        client::TensorClient client({target, std::chrono::seconds(60)});
        const v1::ForwardRequest request = SelfAttentionRequest(model, 1, 4, 16);
        while (!stop_) {
          const auto start = std::chrono::steady_clock::now();
          auto response = client.ForwardRaw(request);
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
          std::lock_guard<std::mutex> lock(mu_);
          answers_.push_back(
              {response.ok() ? grpc::OK : static_cast<grpc::StatusCode>(response.status().code()),
               response.ok() ? response->model_version() : response.status().message(), ms});
        }
      });
    }
  }
  ~SteadyLoad() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& w : workers_) {
      if (w.joinable()) w.join();
    }
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return answers_.size();
  }
  std::vector<Answer> answers() {
    std::lock_guard<std::mutex> lock(mu_);
    return answers_;
  }
  // Waits (bounded) until `n` more answers than `from` have come back.
  ::testing::AssertionResult WaitForAnswers(
      size_t from, size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    return WaitUntil([&] { return count() >= from + n; },
                     std::to_string(n) + " answers after answer " + std::to_string(from), timeout,
                     std::chrono::milliseconds(5));
  }
  // Waits (bounded) until an answer after index `from` came from `version`; its index, or -1.
  long WaitForVersion(size_t from, const std::string& version,
                      std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    long found = -1;
    (void)WaitUntil(
        [&] {
          std::lock_guard<std::mutex> lock(mu_);
          for (size_t i = from; i < answers_.size() && found < 0; ++i) {
            if (answers_[i].code == grpc::OK && answers_[i].version == version) found = long(i);
          }
          return found >= 0;
        },
        "an answer from version " + version, timeout, std::chrono::milliseconds(5));
    return found;
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::vector<Answer> answers_;
};

// Failed answers in [from, to), each as "CODE message" (at most 5, then a count).
inline std::string Failures(const std::vector<Answer>& answers, size_t from = 0,
                            size_t to = SIZE_MAX) {
  std::string text;
  int n = 0;
  for (size_t i = from; i < std::min(to, answers.size()); ++i) {
    if (answers[i].code == grpc::OK) continue;
    if (++n <= 5) text += std::to_string(answers[i].code) + " " + answers[i].version + "\n";
  }
  return n == 0 ? "" : std::to_string(n) + " failed:\n" + text;
}

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

inline std::vector<double> Latencies(const std::vector<Answer>& answers, size_t from, size_t to) {
  std::vector<double> ms;
  for (size_t i = from; i < std::min(to, answers.size()); ++i) ms.push_back(answers[i].ms);
  return ms;
}

}  // namespace mha::testing
