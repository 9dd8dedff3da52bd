#include "server/app/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace mha::serve {
namespace {

// Self-pipe: the handler only write()s the signal number (async-signal-safe); a watcher thread
// does the rest. A handler, not sigwait(), because libraries (OpenBLAS) start threads before
// main() whose signal masks we cannot control.
int g_signal_pipe[2] = {-1, -1};

extern "C" void OnShutdownSignal(int sig) {
  const int saved_errno = errno;
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

}  // namespace

void SignalWatcher::Start() {
  std::thread([this] {
    for (int count = 0;; ++count) {
      char byte = 0;
      const ssize_t n = read(g_signal_pipe[0], &byte, 1);
      if (n < 0 && errno == EINTR) {
        --count;
        continue;
      }
      if (n <= 0) return;
      if (count > 0) {
        std::fprintf(stderr, "mha-server: second signal %d, exiting now\n", byte);
        std::_Exit(1);
      }
      std::lock_guard<std::mutex> lock(mu_);
      signal_ = byte;
      cv_.notify_all();
    }
  }).detach();
}

int SignalWatcher::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return signal_ != 0 || notified_; });
  notified_ = false;
  return signal_;
}

int SignalWatcher::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return signal_ != 0; });
  return signal_;
}

void SignalWatcher::Notify() {
  std::lock_guard<std::mutex> lock(mu_);
  notified_ = true;
  cv_.notify_all();
}

void InstallShutdownSignalHandlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    std::perror("mha-server: pipe2");
    std::_Exit(1);
  }
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace mha::serve
