#include "server/serving/sessions/kv_write_queue.h"

#include <utility>
#include <vector>

namespace mha::serve {

KvWriteQueue::KvWriteQueue(size_t capacity) : capacity_(capacity) {
  writer_ = std::thread([this] { Run(); });
}

bool KvWriteQueue::Push(KvWriteJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || jobs_.size() >= capacity_) {
      ++refused_;
      return false;
    }
    bytes_ += job.bytes;
    jobs_.push_back(Entry{std::move(job), Clock::now(), ++next_seq_});
  }
  cv_.notify_all();
  return true;
}

bool KvWriteQueue::Flush(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = next_seq_;
  return cv_.wait_until(lock, deadline, [&] { return done_seq_ >= target || stop_; }) &&
         done_seq_ >= target;
}

void KvWriteQueue::Stop() {
  std::deque<Entry> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    dropped.swap(jobs_);
    bytes_ = 0;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  for (auto& e : dropped) {
    if (e.job.done) e.job.done(Cancelled("the KV store's writer stopped before this write"));
  }
}

void KvWriteQueue::Run() {
  for (;;) {
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      entry = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const Status status = entry.job.run ? entry.job.run() : Status::Ok();
    if (entry.job.done) entry.job.done(status);
    {
      std::lock_guard<std::mutex> lock(mu_);
      bytes_ -= entry.job.bytes;
      done_seq_ = entry.seq;
    }
    cv_.notify_all();
  }
}

size_t KvWriteQueue::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

int64_t KvWriteQueue::bytes_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

double KvWriteQueue::lag_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.empty()) return 0;
  return std::chrono::duration<double>(Clock::now() - jobs_.front().queued).count();
}

int64_t KvWriteQueue::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

int64_t KvWriteQueue::ran() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_seq_;
}

}  // namespace mha::serve
