// CqUnaryMethod: one raw (bytes in, bytes out) unary method served on gRPC's completion-queue API,
// in the pattern of gRPC's greeter_async_server.cc: the method keeps `slots` calls requested on a
// shared CqQueue (cq_queue.h: one thread at a time leads it), and the thread that takes a call
// runs its handler. Every method of mha-server is served this way (streams: cq_stream.h), so that
// gRPC starts no callback-queue or synchronous-server threads of its own.
//
// Why (docs/performance.md, "The host floor"): Debian's gRPC 1.51 runs every callback-API handler
// and reaction on its executor threads, 6–7 thread hand-offs per call at c=1, against one for a
// thread that drains its own queue. A handler here may also do a small pass itself
// (CqCall::may_block) instead of handing it to a worker and back: before it blocks, the leader
// hands the queue to a follower (CqQueue::Caller(), server/serving/caller_thread.h).
//
// Invariants:
//   - a call object lives until both of its events came back: the request-then-finish tag and
//     the done tag (AsyncNotifyWhenDone); the last one deletes it, on whichever thread;
//   - Finish is called once per started call, from any thread;
//   - a new call is requested before the handler of the one just taken runs, so the number of
//     requested calls stays `slots` until the queue shuts down;
//   - a handler blocks only after CqQueue::Caller().BeforeBlocking(), or the queue waits for it;
//   - lifecycle: constructed before the queue's Start() (which requests its first calls); the
//     method outlives the queue's Shutdown().
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <functional>
#include <memory>
#include <utility>

#include "server/frontends/cq/cq_queue.h"

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
  // CqQueue::Caller().BeforeBlocking() (which hands the queue to that thread).
  bool may_block() const { return may_block_; }
  // Sends response() with an OK status, or the status alone; once per call, from any thread.
  void Finish(const grpc::Status& status);

 private:
  friend class CqUnaryMethod;
  enum class Event { kMain, kDone };
  using Tag = CqQueue::EventTag<CqCall, Event>;
  friend Tag;
  explicit CqCall(CqUnaryMethod* method);
  ~CqCall();
  void OnEvent(Event event, bool ok);
  void StartFinish(const grpc::Status& status);  // the responder's Finish (cq_unary.cc)
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
    int slots = 32;  // calls requested at any time
  };

  // Requests its first calls when `queue` starts.
  CqUnaryMethod(CqQueue* queue, RequestFn request, Handler handler, Options options);
  CqUnaryMethod(const CqUnaryMethod&) = delete;
  CqUnaryMethod& operator=(const CqUnaryMethod&) = delete;

  // Call objects alive (requested or running): 0 after the queue's Shutdown when nothing leaked.
  int live_calls() const { return live_.load(); }

 private:
  friend class CqCall;
  void RequestOne();  // a new call requested on the queue (nothing once the queue shuts down)

  CqQueue* const queue_;
  const RequestFn request_;
  const Handler handler_;
  const Options options_;
  std::atomic<int> live_{0};  // CqCall objects alive
};

// A CqUnaryMethod on `queue` for one raw method of `service`: `request` is its generated
// `WithRawMethod_<M>::Request<M>` (called with the queue for both of its queues); `handler` runs
// for every call.
template <class Service, class RequestMember>
std::unique_ptr<CqUnaryMethod> ServeRawUnary(CqQueue* queue, Service* service,
                                             RequestMember request, CqUnaryMethod::Handler handler,
                                             CqUnaryMethod::Options options = {}) {
  return std::make_unique<CqUnaryMethod>(
      queue,
      [service, request](grpc::ServerContext* context, grpc::ByteBuffer* bytes,
                         grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* responder,
                         grpc::ServerCompletionQueue* cq, void* tag) {
        (service->*request)(context, bytes, responder, cq, cq, tag);
      },
      std::move(handler), options);
}

}  // namespace mha::serve
