// CallerThread: the thread a call into serving arrives on, as its front end describes it, passed
// explicitly with the call (InferenceRequest::caller, InferenceTask::caller, the session calls).
//
//   may_run_pass  the thread may run a forward pass itself (WorkQueue's inline pass) without
//                 delaying anybody: a completion queue's leader while another of its threads waits
//                 to take the queue over (server/frontends/cq/cq_unary.h), or a REST connection's
//                 own thread;
//   BeforeBlocking()  what the thread must do before it blocks for long (a pass, a spill to disk,
//                 a restore): a completion queue's leader hands its queue to a waiting thread. Runs
//                 the hook at most once; a thread with no hook (a worker, a REST thread) does
//                 nothing.
//
// A CallerThread is valid only during the call it came with: serving calls BeforeBlocking on the
// caller's own thread, inside that call, and never keeps it for later (a step that starts later,
// on a worker, gets a CallerThread of its own: Worker()). Header-only, torch-free.
#pragma once

namespace mha::serve {

class CallerThread {
 public:
  using Hook = void (*)(void* arg);

  // A thread that may block freely and runs no pass of a caller's (a worker's).
  CallerThread() = default;
  static CallerThread Worker() { return CallerThread(); }
  // A front end's thread: whether it may run a pass, and its hook (may be null) with `arg`.
  CallerThread(bool may_run_pass, Hook hook, void* arg)
      : may_run_pass_(may_run_pass), hook_(hook), arg_(arg) {}

  bool may_run_pass() const { return may_run_pass_; }

  // Runs the hook, once (a second call does nothing).
  void BeforeBlocking() {
    Hook hook = hook_;
    if (hook == nullptr) return;
    hook_ = nullptr;
    hook(arg_);
  }

 private:
  bool may_run_pass_ = false;
  Hook hook_ = nullptr;
  void* arg_ = nullptr;
};

}  // namespace mha::serve
