// KvWriteQueue: the write-behind path of the shared KV tier (--kv-store-write-behind). A step
// that fills a block copies its bytes out (a memcpy, on its own thread) and pushes a job here; one
// writer thread sends the jobs to the store in order, off every step's path. Bounded: a push onto
// a full queue is refused (the caller counts the loss of durability and writes the session again
// later), so a slow or unreachable store never holds a step and never grows memory without bound.
// Its depth and lag (the age of the oldest job) are on /metrics.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "mha/status.h"

namespace mha::serve {

struct KvWriteJob {
  std::string session;
  int64_t bytes = 0;                        // what it holds (for the queue's byte gauge)
  std::function<Status()> run;              // on the writer thread
  std::function<void(const Status&)> done;  // after run, on the writer thread; may be null
};

class KvWriteQueue {
 public:
  // At most `capacity` jobs waiting. Starts the writer thread.
  explicit KvWriteQueue(size_t capacity);
  ~KvWriteQueue() { Stop(); }
  KvWriteQueue(const KvWriteQueue&) = delete;
  KvWriteQueue& operator=(const KvWriteQueue&) = delete;

  // Queues `job`; false (nothing queued, `done` not called) when the queue is full or stopped.
  bool Push(KvWriteJob job);
  // Blocks until every job pushed before the call has run, or `deadline`: whether they all ran.
  bool Flush(std::chrono::steady_clock::time_point deadline);
  // Ends the writer after the job it runs; the jobs still waiting are done with CANCELLED.
  void Stop();

  size_t depth() const;
  int64_t bytes_queued() const;
  double lag_seconds() const;  // age of the oldest waiting job; 0 when none waits
  int64_t refused() const;     // pushes refused (full)
  int64_t ran() const;         // jobs run

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    KvWriteJob job;
    Clock::time_point queued;
    int64_t seq = 0;
  };
  void Run();

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> jobs_;               // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  int64_t next_seq_ = 0, done_seq_ = 0;  // guarded by mu_: jobs pushed, jobs finished (in order)
  int64_t bytes_ = 0, refused_ = 0;      // guarded by mu_
  std::thread writer_;
};

}  // namespace mha::serve
