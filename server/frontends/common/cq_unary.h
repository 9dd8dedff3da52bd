// CqUnaryMethod: one raw (bytes in, bytes out) unary method served on gRPC's completion-queue API,
// in the pattern of gRPC's greeter_async_server.cc: one thread at a time (the leader) waits on
// the method's ServerCompletionQueue, which always has `slots` calls requested, and runs the
// handler of what it takes itself; the other threads (followers) wait for the lead. Every other
// method stays on the callback API (a service mixes them per method).
//
// Why (issue 46, docs/host_floor.md): Debian's gRPC 1.51 runs every callback-API handler and
// reaction on its executor threads, 6–7 thread hand-offs per call at c=1, against one for a
// thread that drains its own queue; and two threads waiting on one queue hand each event from the
// one that polled to the other (epoll1 wakes a second waiter for it), 3.5 switches a call against
// 1. A handler here may also do a small pass itself (CqCall::may_block) instead of handing it to
// a worker and back: before it blocks, the leader hands the queue to a follower (CallerThread).
//
// Invariants:
//   - a call object lives until both of its events came back: the request-then-finish tag and
//     the done tag (AsyncNotifyWhenDone); the last one deletes it, on whichever thread;
//   - Finish is called once per started call, from any thread;
//   - a new call is requested before the handler of the one just taken runs, so the number of
//     requested calls stays `slots` until the queue shuts down;
//   - at most one thread leads (waits in Next or runs what it took); a handler blocks only after
//     CallerThread::BeforeBlocking() (which hands the lead on), or the queue waits for it;
//   - lifecycle: AddTo(builder) before BuildAndStart, Start() after it, Shutdown() after the
//     server's Shutdown (and after everything that may still Finish a call is stopped); the
//     method must outlive the server (it owns the queue the server delivers to).
#pragma once

#include <grpcpp/completion_queue.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace mha::serve {

class CqUnaryMethod;

// One call of a CqUnaryMethod: what the handler reads and answers.
class CqCall {
 public:
  grpc::ServerContext* context() { return &context_; }
  const grpc::ByteBuffer& request() const { return request_; }
  grpc::ByteBuffer* response() { return &response_; }
  // True when another of the method's threads was waiting for the lead as this one started: the
  // handler may then block this thread for a pass without delaying anybody's call, once it called
  // CallerThread::BeforeBlocking() (which hands the queue to that thread).
  bool may_block() const { return may_block_; }
  // Sends response() with an OK status, or the status alone; once per call, from any thread.
  void Finish(const grpc::Status& status);

 private:
  friend class CqUnaryMethod;
  enum class Event { kMain, kDone };
  struct Tag {
    CqCall* call;
    Event event;
  };
  explicit CqCall(CqUnaryMethod* method);
  ~CqCall();
  void OnEvent(Event event, bool ok);
  void Release();  // one of the two outstanding events is back; the last deletes the call

  CqUnaryMethod* const method_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_, response_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  Tag main_tag_, done_tag_;
  // The call's events may come back on different threads: these order what each wrote for the
  // next (gRPC's queue orders them too, but out of ThreadSanitizer's sight).
  std::atomic<bool> started_{false};    // the request tag came back ok: a call is running
  std::atomic<bool> finishing_{false};  // Finish was called
  bool may_block_ = false;
  std::atomic<int> outstanding_{2};  // main (finish) and done, once started
};

class CqUnaryMethod {
 public:
  // The generated `Request<Method>` of a `WithRawMethod_<Method>` service (both queues = ours).
  using RequestFn = std::function<void(grpc::ServerContext*, grpc::ByteBuffer*,
                                       grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>*,
                                       grpc::ServerCompletionQueue*, void*)>;
  // Runs on a queue thread for every call that started; answers with call->Finish, now or later.
  using Handler = std::function<void(CqCall* call)>;

  struct Options {
    int threads = 2;  // threads taking the lead in turn (at least 2: one waits to take it over)
    int slots = 32;   // calls requested at any time
  };

  CqUnaryMethod(RequestFn request, Handler handler, Options options);
  ~CqUnaryMethod();  // Shutdown()
  CqUnaryMethod(const CqUnaryMethod&) = delete;
  CqUnaryMethod& operator=(const CqUnaryMethod&) = delete;

  void AddTo(grpc::ServerBuilder* builder);  // before BuildAndStart
  void Start();                              // after BuildAndStart: requests calls, starts threads
  // Shuts the queue down, drains it (deleting what is left) and joins the threads. Idempotent.
  void Shutdown();

  // Call objects alive (requested or running): 0 after Shutdown when nothing leaked.
  int live_calls() const { return live_.load(); }
  // Threads waiting now: for the next event (the leader) or for the lead (followers).
  int idle_threads() const { return idle_.load(); }

 private:
  friend class CqCall;
  struct Lead;        // the lead as one thread holds it (cq_unary.cc)
  void RequestOne();  // a new call requested on the queue (nothing once the queue shuts down)
  void Loop();        // follows, leads when its turn comes; returns once the queue is drained
  bool RunLead();     // leads: false once the queue is drained, true once the lead was handed on
  static void HandOff(void* lead);  // CallerThread's hook while a handler runs on the leader

  const RequestFn request_;
  const Handler handler_;
  const Options options_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::mutex mu_;             // orders RequestOne against the queue's shutdown
  bool accepting_ = false;    // Start() ran and Shutdown() did not
  bool shut_down_ = false;    // the queue was shut down (it lives on until the destructor)
  std::atomic<int> idle_{0};  // threads waiting in Next or for the lead
  std::mutex lead_mu_;        // the lead: led_, drained_ and the followers' wait
  std::condition_variable lead_cv_;
  bool led_ = false;               // a thread leads (waits in Next or runs what it took)
  bool drained_ = false;           // Next said the queue is shut down and empty
  std::atomic<int> followers_{0};  // threads waiting for the lead (written under lead_mu_)
  std::atomic<int> live_{0};       // CqCall objects alive
  std::vector<std::thread> threads_;
};

// A CqUnaryMethod for one raw method of `service`: `request` is its generated
// `WithRawMethod_<M>::Request<M>` (called with our queue for both of its queues); `handler` runs
// for every call.
template <class Service, class RequestMember>
std::unique_ptr<CqUnaryMethod> ServeRawUnary(Service* service, RequestMember request,
                                             CqUnaryMethod::Handler handler, int threads) {
  CqUnaryMethod::Options options;
  options.threads = threads;
  return std::make_unique<CqUnaryMethod>(
      [service, request](grpc::ServerContext* context, grpc::ByteBuffer* bytes,
                         grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* responder,
                         grpc::ServerCompletionQueue* cq, void* tag) {
        (service->*request)(context, bytes, responder, cq, cq, tag);
      },
      std::move(handler), options);
}

}  // namespace mha::serve
