// CqBidiReactor: a bidirectional stream served on gRPC's completion-queue API (a CqQueue), behind
// the callback API's reactor interface (StartRead, StartWrite, Finish; OnReadDone, OnWriteDone,
// OnCancel, OnDone), so that one reactor (OrderedStreamReactor) is written once for both APIs.
// CqStreamMethod keeps `slots` calls of one raw bidi method requested on the queue and hands each
// call that starts to a factory, which makes its reactor.
//
// Invariants (the callback API's contract, which the reactor relies on):
//   - at most one read and one write outstanding; Finish once, with no write outstanding (a read
//     may be: it then comes back not ok);
//   - OnCancel at most once, when the call was cancelled, before OnDone;
//   - OnDone exactly once, after Finish's event, the call's done event and every read and write
//     came back; nothing is called after it (the reactor may delete itself there);
//   - reactions run on the queue's threads, outside this class's lock; a message that does not
//     parse reads as not ok (as the callback API's typed reads do).
#pragma once

#include <grpcpp/alarm.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <functional>
#include <memory>
#include <mutex>

#include "server/frontends/common/raw_message.h"
#include "server/frontends/cq/cq_queue.h"

namespace mha::serve {

class CqStreamMethod;
class CqBidiBase;

// One requested or running call of a CqStreamMethod: what gRPC fills in and the tags of its
// events. Owned by the method until it starts, then by its reactor.
class CqStreamCall {
 public:
  grpc::ServerContext* context() { return &context_; }

 private:
  friend class CqStreamMethod;
  friend class CqBidiBase;
  enum class Event { kStart, kRead, kWrite, kFinish, kDone, kAlarm };
  using Tag = CqQueue::EventTag<CqStreamCall, Event>;
  friend Tag;
  explicit CqStreamCall(CqStreamMethod* method);
  void OnEvent(Event event, bool ok);

  CqStreamMethod* const method_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_;
  grpc::ByteBuffer read_, write_;
  grpc::Alarm alarm_;  // a write that could not be serialized comes back through it, not ok
  Tag start_, read_tag_, write_tag_, finish_tag_, done_tag_, alarm_tag_;
  CqBidiBase* reactor_ = nullptr;  // set by the reactor's constructor, before its first operation
  std::mutex mu_;                  // orders the done event against Started()
  bool started_ = false;           // the reactor is whole: done events go to it
  bool done_early_ = false;        // the done event came before that
};

// The untyped half of CqBidiReactor: the call's outstanding operations and when OnDone comes.
class CqBidiBase {
 public:
  CqBidiBase(const CqBidiBase&) = delete;
  CqBidiBase& operator=(const CqBidiBase&) = delete;

 protected:
  explicit CqBidiBase(std::unique_ptr<CqStreamCall> call);
  virtual ~CqBidiBase();

  void ReadRaw();
  void WriteRaw(const grpc::Status& serialized);  // call_->write_ holds the bytes when ok
  void FinishRaw(const grpc::Status& status);
  grpc::ByteBuffer* write_buffer() { return &call_->write_; }

  virtual void OnRawReadDone(bool ok, const grpc::ByteBuffer& bytes) = 0;
  virtual void OnWriteDone(bool ok) {}
  virtual void OnCancel() {}
  virtual void OnDone() = 0;

 private:
  friend class CqStreamCall;
  void OnEvent(CqStreamCall::Event event, bool ok);
  void MaybeDone();  // OnDone, once it is due (see the invariants)
  CqQueue* Queue() const;

  const std::unique_ptr<CqStreamCall> call_;
  std::mutex mu_;
  bool reading_ = false, writing_ = false;
  bool finish_back_ = false, done_back_ = false, done_called_ = false;
  int reacting_ = 0;  // reactions running now: OnDone waits for them
};

// The typed reactor (the callback API's ServerBidiReactor<Request, Response> interface).
template <class Request, class Response>
class CqBidiReactor : public CqBidiBase {
 public:
  explicit CqBidiReactor(std::unique_ptr<CqStreamCall> call) : CqBidiBase(std::move(call)) {}

  void StartRead(Request* request) {
    read_target_ = request;
    ReadRaw();
  }
  void StartWrite(const Response* response) {
    bool own_buffer = false;
    write_buffer()->Clear();  // the last write's bytes (that write came back: gRPC holds its own)
    WriteRaw(
        grpc::SerializationTraits<Response>::Serialize(*response, write_buffer(), &own_buffer));
  }
  void Finish(const grpc::Status& status) { FinishRaw(status); }
  virtual void OnReadDone(bool ok) {}

 private:
  void OnRawReadDone(bool ok, const grpc::ByteBuffer& bytes) final {
    OnReadDone(ok && ParseRawMessage(bytes, read_target_));
  }
  Request* read_target_ = nullptr;
};

class CqStreamMethod {
 public:
  // The generated `Request<Method>` of a `WithRawMethod_<Method>` bidi method (both queues = ours).
  using RequestFn = std::function<void(
      grpc::ServerContext*, grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>*,
      grpc::ServerCompletionQueue*, void*)>;
  // Makes the reactor of a call that started, which owns the call and deletes itself in OnDone.
  using Factory = std::function<CqBidiBase*(std::unique_ptr<CqStreamCall> call)>;
  struct Options {
    int slots = 4;  // calls requested at any time
  };

  // Requests its first calls when `queue` starts.
  CqStreamMethod(CqQueue* queue, RequestFn request, Factory factory, Options options);
  CqStreamMethod(const CqStreamMethod&) = delete;
  CqStreamMethod& operator=(const CqStreamMethod&) = delete;

 private:
  friend class CqStreamCall;
  friend class CqBidiBase;
  void RequestOne();

  CqQueue* const queue_;
  const RequestFn request_;
  const Factory factory_;
  const Options options_;
};

// A CqStreamMethod for one raw bidi method of `service` (`request`: its generated
// `WithRawMethod_<M>::Request<M>`).
template <class Service, class RequestMember>
std::unique_ptr<CqStreamMethod> ServeRawStream(CqQueue* queue, Service* service,
                                               RequestMember request,
                                               CqStreamMethod::Factory factory,
                                               CqStreamMethod::Options options = {}) {
  return std::make_unique<CqStreamMethod>(
      queue,
      [service, request](grpc::ServerContext* context,
                         grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream,
                         grpc::ServerCompletionQueue* cq,
                         void* tag) { (service->*request)(context, stream, cq, cq, tag); },
      std::move(factory), options);
}

}  // namespace mha::serve
