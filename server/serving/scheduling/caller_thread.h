// CallerThread: what a thread that others count on must do before it blocks for long.
//
// A completion-queue leader (server/frontends/common/cq_unary.h) is the one thread waiting for
// its queue's events: if it blocked in a pass of its own, nobody would take the next call. While
// it runs a handler it installs a hook here (Scope); code about to block on the calling thread
// (WorkQueue's inline pass) calls BeforeBlocking(), which runs the hook once: the leader hands its
// queue to a waiting thread. On any other thread (a REST connection's, a worker's) nothing is
// installed and BeforeBlocking() does nothing. Header-only, torch-free.
#pragma once

namespace mha::serve {

class CallerThread {
 public:
  using Hook = void (*)(void* arg);

  // Installs `hook(arg)` on this thread for the scope's life (restoring what was there before).
  class Scope {
   public:
    Scope(Hook hook, void* arg) : saved_hook_(hook_), saved_arg_(arg_) {
      hook_ = hook;
      arg_ = arg;
    }
    ~Scope() {
      hook_ = saved_hook_;
      arg_ = saved_arg_;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Hook saved_hook_;
    void* saved_arg_;
  };

  // Runs this thread's hook, once (a second call in the same scope does nothing).
  static void BeforeBlocking() {
    Hook hook = hook_;
    if (hook == nullptr) return;
    hook_ = nullptr;
    hook(arg_);
  }

 private:
  static inline thread_local Hook hook_ = nullptr;
  static inline thread_local void* arg_ = nullptr;
};

}  // namespace mha::serve
