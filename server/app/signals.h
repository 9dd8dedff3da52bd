// Shutdown signals: SIGINT/SIGTERM go through a self-pipe to a watcher thread. The first one
// requests the graceful stop (SignalWatcher::Wait returns it); a second one ends the process at
// once with exit code 1.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace mha::serve {

// Routes SIGINT/SIGTERM to the watcher and ignores SIGPIPE. Call first thing in main.
void InstallShutdownSignalHandlers();

class SignalWatcher {
 public:
  void Start();  // the watcher thread (detached)
  // Waits up to `timeout` for a signal, or until Notify(); returns the signal, or 0.
  int WaitFor(std::chrono::milliseconds timeout);
  int Wait();     // until a signal arrives
  void Notify();  // wakes WaitFor early (e.g. models loaded)

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int signal_ = 0;
  bool notified_ = false;
};

}  // namespace mha::serve
