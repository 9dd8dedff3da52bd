#include "server/frontends/cq/cq_queue.h"

#include <algorithm>
#include <utility>

#include "server/serving/caller_thread.h"

// The acquire of CqQueue::HandOver's release (cq_queue.h).
#if defined(__SANITIZE_THREAD__)
#define MHA_CQ_TAKEN(tag) __tsan_acquire(tag)
#else
#define MHA_CQ_TAKEN(tag) (void)(tag)
#endif

namespace mha::serve {

// The lead as the thread that holds it sees it: `held` turns false when a handler hands it on.
struct CqQueue::Lead {
  CqQueue* queue;
  bool held = true;
};

namespace {
// The lead this thread holds while it runs a tag (RunLead), for Caller().
thread_local void* running_lead = nullptr;
}  // namespace

CallerThread CqQueue::Caller() {
  auto* lead = static_cast<Lead*>(running_lead);
  if (lead == nullptr || !lead->held) return CallerThread();
  return CallerThread(lead->queue->follower_waiting(), &CqQueue::HandOff, lead);
}

CqQueue::CqQueue(Options options) : options_(options) {}

CqQueue::~CqQueue() { Shutdown(); }

void CqQueue::AddTo(grpc::ServerBuilder* builder) { cq_ = builder->AddCompletionQueue(); }

void CqQueue::OnStart(std::function<void()> first_requests) {
  on_start_.push_back(std::move(first_requests));
}

void CqQueue::OnStartRequest(int slots, std::function<void()> request_one) {
  OnStart([slots, request_one = std::move(request_one)] {
    for (int i = 0; i < std::max(1, slots); ++i) request_one();
  });
}

void CqQueue::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = true;
  }
  for (const auto& requests : on_start_) requests();
  const int threads = std::max(2, options_.threads);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

void CqQueue::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(lead_mu_);
      followers_.fetch_add(1, std::memory_order_release);
      idle_.fetch_add(1, std::memory_order_relaxed);
      lead_cv_.wait(lock, [this] { return !led_ || drained_; });
      idle_.fetch_sub(1, std::memory_order_relaxed);
      followers_.fetch_sub(1, std::memory_order_release);
      if (drained_) return;
      led_ = true;
    }
    if (!RunLead()) return;
  }
}

bool CqQueue::RunLead() {
  Lead lead{this};
  void* tag = nullptr;
  bool ok = false;
  while (lead.held) {
    idle_.fetch_add(1, std::memory_order_relaxed);
    const bool got = cq_->Next(&tag, &ok);
    idle_.fetch_sub(1, std::memory_order_relaxed);
    if (!got) {  // shut down and drained: the followers end too
      {
        std::lock_guard<std::mutex> lock(lead_mu_);
        drained_ = true;
        led_ = false;
      }
      lead_cv_.notify_all();
      return false;
    }
    MHA_CQ_TAKEN(tag);
    running_lead = &lead;
    static_cast<Tag*>(tag)->OnEvent(ok);
    running_lead = nullptr;
  }
  return true;
}

void CqQueue::HandOff(void* arg) {
  auto* lead = static_cast<Lead*>(arg);
  if (!lead->held) return;  // handed on already (by another copy of the CallerThread)
  CqQueue* const queue = lead->queue;
  {
    std::lock_guard<std::mutex> lock(queue->lead_mu_);
    queue->led_ = false;
  }
  lead->held = false;
  queue->lead_cv_.notify_one();
}

void CqQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cq_ || shut_down_) return;
    shut_down_ = true;
    accepting_ = false;
    open_.store(false);  // then no operation starts that was not already starting
    while (starting_.load() > 0) std::this_thread::yield();
    cq_->Shutdown();
  }
  if (threads_.empty()) {  // never started: drain here (nothing was requested)
    Loop();
    return;
  }
  for (auto& t : threads_) t.join();  // the leader drains the queue; then they all end
  threads_.clear();
}

}  // namespace mha::serve
