// mha-test-server: mha-server (the same ServerMain) plus a hold gate on every forward pass, for
// the service tests that must hold a pass (shutdown during a pass, unload draining, merging of
// queued session steps) without timing it. `--test-hold-dir DIR` (this binary's only flag of its
// own, taken off argv before mha-server's flags are parsed) installs BatcherOptions::pass_hook:
// pass k (1-based, counted over every model from the server's start) first creates DIR/entered.k,
// then waits while DIR/hold exists and DIR/release.k does not (looking every 2 ms; at most 120 s).
// Model loading is held the same way, before it starts, while DIR/hold-load exists
// (ServerConfig::load_hold; NOT_SERVING meanwhile). The test side is tests/service/hold_gate.h.
// Without the flag the binary is mha-server.
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/app/server_app.h"

namespace {

namespace fs = std::filesystem;

class HoldGate {
 public:
  // A failure guard, not a duration a test relies on: a test that holds a pass this long has
  // failed (or died) without releasing it.
  static constexpr std::chrono::seconds kHoldLimit{120};

  explicit HoldGate(std::string dir) : dir_(std::move(dir)) {}

  mha::Status Pass(const std::function<mha::Status()>& pass) {
    const std::string k = std::to_string(++passes_);
    std::ofstream(dir_ / ("entered." + k)).close();
    const fs::path hold = dir_ / "hold", release = dir_ / ("release." + k);
    const auto give_up = std::chrono::steady_clock::now() + kHoldLimit;
    std::error_code ec;
    while (fs::exists(hold, ec) && !fs::exists(release, ec)) {
      if (std::chrono::steady_clock::now() > give_up) {
        std::cerr << "mha-test-server: pass " << k << " held for " << kHoldLimit.count()
                  << " s and never released; letting it through" << std::endl;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return pass();
  }

  // True while model loading is held (ServerConfig::load_hold, asked every 2 ms).
  bool LoadHeld() {
    if (!load_asked_.exchange(true)) load_give_up_ = std::chrono::steady_clock::now() + kHoldLimit;
    std::error_code ec;
    if (!fs::exists(dir_ / "hold-load", ec)) return false;
    if (std::chrono::steady_clock::now() <= load_give_up_) return true;
    std::cerr << "mha-test-server: loading held for " << kHoldLimit.count()
              << " s and never released; letting it through" << std::endl;
    return false;
  }

 private:
  const fs::path dir_;
  std::atomic<int64_t> passes_{0};
  std::atomic<bool> load_asked_{false};
  std::chrono::steady_clock::time_point load_give_up_;  // set by the first LoadHeld (one thread)
};

}  // namespace

int main(int argc, char** argv) {
  std::string hold_dir;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--test-hold-dir") == 0 && i + 1 < argc) {
      hold_dir = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  args.push_back(nullptr);
  return mha::serve::ServerMain(
      static_cast<int>(args.size()) - 1, args.data(), [&hold_dir](mha::serve::ServerConfig* c) {
        if (hold_dir.empty()) return;
        auto gate = std::make_shared<HoldGate>(hold_dir);
        c->core.batcher.pass_hook = [gate](const std::function<mha::Status()>& pass) {
          return gate->Pass(pass);
        };
        c->load_hold = [gate] { return gate->LoadHeld(); };
      });
}
