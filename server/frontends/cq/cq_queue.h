// CqQueue: one gRPC ServerCompletionQueue and the threads that take its events, shared by every
// method served on gRPC's completion-queue API (mha.v1 Forward, OIP ModelInfer: cq_unary.h).
//
// Leader and followers: one thread at a time (the leader) waits in Next and runs what it takes;
// the others (followers) wait for the lead. Two threads waiting on one queue would hand each event
// from the one that polled to the other (epoll1 wakes a second waiter for it: 3.5 switches a call
// against 1, docs/performance.md), and two queues would each have a thread polling. A handler about
// to block (a pass of its own) first calls BeforeBlocking() on the CallerThread it got from
// Caller() (server/serving/caller_thread.h), which hands the lead to a follower; serving gets that
// CallerThread with the call (InferenceRequest::caller and the session calls).
//
// Invariants:
//   - every tag handed to the queue is a CqQueue::Tag, told once when its event comes back;
//   - at most one thread leads; only the leader hands the lead on, so the followers waiting can
//     only grow in number while a handler runs on the leader (follower_waiting() stays true);
//   - calls are requested only while the queue accepts (RequestWhileAccepting: from Start() to
//     Shutdown()), so every requested call's tag comes back, failed at the latest at shutdown;
//   - an operation on a call (read, write, finish) starts only through StartWhileAccepting: once
//     Shutdown() began, gRPC would abort on an operation started on the shut-down queue (events
//     still drained then may react with one: a stream cancelled at shutdown finishing);
//   - lifecycle: AddTo(builder) before BuildAndStart, Start() after it (it runs what the methods
//     registered with OnStart: their first requests), Shutdown() after the server's Shutdown and
//     after everything that may still finish a call is stopped; the queue outlives the server.
#pragma once

#include <grpcpp/completion_queue.h>
#include <grpcpp/server_builder.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/serving/caller_thread.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace mha::serve {

class CqQueue {
 public:
  // What every tag on the queue is: told once, on the thread that took the event.
  class Tag {
   public:
    virtual void OnEvent(bool ok) = 0;

   protected:
    ~Tag() = default;
  };

  // A tag that hands its event to `owner->OnEvent(event, ok)`: a call object keeps one per kind
  // of event it waits for (the owner befriends it when OnEvent is private).
  template <class Owner, class Event>
  class EventTag final : public Tag {
   public:
    EventTag(Owner* owner, Event event) : owner_(owner), event_(event) {}
    void OnEvent(bool ok) override { owner_->OnEvent(event_, ok); }

   private:
    Owner* const owner_;
    const Event event_;
  };

  struct Options {
    int threads = 2;  // threads taking the lead in turn (at least 2: one waits to take it over)
  };

  explicit CqQueue(Options options);
  ~CqQueue();  // Shutdown()
  CqQueue(const CqQueue&) = delete;
  CqQueue& operator=(const CqQueue&) = delete;

  void AddTo(grpc::ServerBuilder* builder);  // before BuildAndStart
  // `first_requests` runs in Start(), before the threads start (a method's first calls).
  void OnStart(std::function<void()> first_requests);
  void Start();
  // Stops accepting, shuts the queue down, and joins the threads once it is drained (every tag
  // told). Idempotent.
  void Shutdown();

  // Runs `request` (which hands a tag to the queue) while the queue accepts; false after
  // Shutdown began (nothing ran). `request` must not call back into the queue.
  template <class F>
  bool RequestWhileAccepting(F&& request) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return false;
    request();
    return true;
  }

  // Requests a method's next call: its context asks to be told when the call is done (`done`)
  // and `request` hands the call to gRPC, while the queue accepts. False after Shutdown began
  // (nothing ran): the caller drops the call, for which nothing will come. The one way every
  // method here requests its calls.
  template <class F>
  bool RequestCall(grpc::ServerContext* context, Tag* done, F&& request) {
    return RequestWhileAccepting([&] {
      context->AsyncNotifyWhenDone(HandOver(done));
      request();
    });
  }

  // A method's first `slots` (at least one) calls, requested by `request_one` in Start().
  void OnStartRequest(int slots, std::function<void()> request_one);

  // Runs `start` (which starts an operation on a call whose event comes back on this queue)
  // unless Shutdown() began; false then, and nothing ran: the caller treats the operation as
  // never started (its event will not come). Lock-free: Shutdown waits for the starts under way.
  template <class F>
  bool StartWhileAccepting(F&& start) {
    starting_.fetch_add(1);
    const bool open = open_.load();
    if (open) start();
    starting_.fetch_sub(1);
    return open;
  }

  grpc::ServerCompletionQueue* get() { return cq_.get(); }

  // What to hand gRPC for `tag` (the Tag's own address, which RunLead casts back). ThreadSanitizer
  // does not see gRPC's queue (Debian's libgrpc is not instrumented): a tag handed over on one
  // thread comes back from Next on another; this annotates the hand-over as the release it is
  // (RunLead the acquire).
  static void* HandOver(Tag* tag) {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(tag);
#endif
    return tag;
  }
  // True when a thread waits for the lead (read by a handler on the leader: see above).
  bool follower_waiting() const { return followers_.load(std::memory_order_acquire) > 0; }
  // Threads waiting now: for the next event (the leader) or for the lead (followers).
  int idle_threads() const { return idle_.load(); }
  // The thread running a tag now, as serving takes it: on a queue's leader, a CallerThread that
  // may run a pass when a follower waits and hands the lead on before it blocks; on any other
  // thread, one that may block freely. Valid while the tag runs.
  static CallerThread Caller();

 private:
  struct Lead;     // the lead as one thread holds it (cq_queue.cc)
  void Loop();     // follows, leads when its turn comes; returns once the queue is drained
  bool RunLead();  // leads: false once the queue is drained, true once the lead was handed on
  static void HandOff(void* lead);  // CallerThread's hook while a tag runs on the leader

  const Options options_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::vector<std::function<void()>> on_start_;
  std::mutex mu_;                 // orders requests against the queue's shutdown
  bool accepting_ = false;        // Start() ran and Shutdown() did not
  std::atomic<bool> open_{true};  // Shutdown() did not begin (StartWhileAccepting)
  std::atomic<int> starting_{0};  // StartWhileAccepting calls under way
  bool shut_down_ = false;        // the queue was shut down (it lives on until the destructor)
  std::mutex lead_mu_;            // the lead: led_, drained_ and the followers' wait
  std::condition_variable lead_cv_;
  bool led_ = false;               // a thread leads (waits in Next or runs what it took)
  bool drained_ = false;           // Next said the queue is shut down and empty
  std::atomic<int> followers_{0};  // threads waiting for the lead (written under lead_mu_)
  std::atomic<int> idle_{0};       // threads waiting in Next or for the lead
  std::vector<std::thread> threads_;
};

}  // namespace mha::serve
