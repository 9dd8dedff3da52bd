// The test side of mha-test-server's hold gate (tests/service/mha_test_server.cc): a test holds
// forward passes instead of making them slow, waits for a pass to be entered instead of sleeping
// "long enough", and lets passes go one by one or all at once.
//
//   HoldGate gate;
//   ServerProcess server;
//   gate.Attach(&server);                      // runs mha-test-server
//   ASSERT_TRUE(server.Start(gate.Args({...})));
//   gate.Hold();                               // passes from now on wait at the gate
//   ... send a request ...
//   ASSERT_TRUE(gate.WaitEntered(1));          // pass 1 is running (held)
//   gate.ReleaseAll();
//
// Model loading can be held too: HoldLoads() before the server starts, ReleaseLoads() to let it
// load (the server is NOT_SERVING until then).
//
// Passes are numbered from 1 over every model from the server's start (warmup passes do not go
// through the scheduler and are not counted). The destructor lets every pass through; a
// ReleaseOnExit (tests/common/pass_gate.h) declared after the calls that wait on held passes lets
// them go before those calls' destructors wait for them, also when an assertion ends the test
// early. mha-test-server lets a pass held for 120 s through by itself (and logs it), so a test
// process that died holding passes leaves no server stuck. The in-process twin with the same
// calls is tests/common/pass_gate.h's PassGate.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pass_gate.h"  // ReleaseOnExit, and the in-process twin of this gate
#include "server_process.h"
#include "test_util.h"
#include "wait.h"

namespace mha::testing {

class HoldGate {
 public:
  HoldGate() = default;
  ~HoldGate() {
    ReleaseAll();
    ReleaseLoads();
  }
  HoldGate(const HoldGate&) = delete;
  HoldGate& operator=(const HoldGate&) = delete;

  // Makes `server` run mha-test-server (it takes mha-server's flags).
  void Attach(ServerProcess* server) const { server->set_binary(MHA_TEST_SERVER_BINARY); }
  // `args` plus the gate's folder (--test-hold-dir).
  std::vector<std::string> Args(std::vector<std::string> args = {}) const {
    args.insert(args.end(), {"--test-hold-dir", dir_.path()});
    return args;
  }

  // Passes entered from now on wait until released.
  void Hold() const { Touch("hold"); }
  // Lets pass `k` through (held or not yet entered); the others stay held.
  void Release(int64_t k) const { Touch("release." + std::to_string(k)); }
  // Lets every pass through, from now on.
  void ReleaseAll() const {
    std::error_code ec;
    std::filesystem::remove(dir_.File("hold"), ec);
  }
  // Model loading waits (before it starts) until ReleaseLoads().
  void HoldLoads() const { Touch("hold-load"); }
  void ReleaseLoads() const {
    std::error_code ec;
    std::filesystem::remove(dir_.File("hold-load"), ec);
  }
  bool Entered(int64_t k) const {
    std::error_code ec;
    return std::filesystem::exists(dir_.File("entered." + std::to_string(k)), ec);
  }
  // Waits until pass `k` has entered the gate (so it is held, if the gate holds).
  ::testing::AssertionResult WaitEntered(int64_t k,
                                         std::chrono::milliseconds timeout = kWaitTimeout) const {
    return WaitUntil([&] { return Entered(k); },
                     "pass " + std::to_string(k) + " to reach the hold gate", timeout,
                     std::chrono::milliseconds(2));
  }

 private:
  void Touch(const std::string& name) const { std::ofstream(dir_.File(name)).close(); }

  TempDir dir_;
};

}  // namespace mha::testing
