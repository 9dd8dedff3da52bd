#include "client/decoding_session.h"

#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "proto/wire/status_convert.h"
#include "proto/wire/tensor_header.h"

namespace mha::client {
namespace {

using Millis = std::chrono::duration<double, std::milli>;

// The query's tokens per row, or -1 when it is not a [B, T, E] tensor.
int64_t NewTokens(const v1::ForwardRequest& step) {
  return step.query().shape_size() == 3 ? step.query().shape(1) : -1;
}

// Every answered step's tokens as one query [B, sum T, E] (rows concatenated along T), when the
// steps agree on dtype, B and E; false when they do not (then they are replayed one by one).
bool ConcatQueries(const std::vector<v1::ForwardRequest>& steps, v1::Tensor* out) {
  if (steps.empty()) return false;
  const v1::Tensor& first = steps.front().query();
  if (first.shape_size() != 3) return false;
  const int64_t b = first.shape(0), e = first.shape(2);
  const size_t element = codec::ElementSize(first.dtype());
  int64_t total = 0;
  for (const auto& s : steps) {
    const v1::Tensor& q = s.query();
    if (q.dtype() != first.dtype() || q.shape_size() != 3 || q.shape(0) != b || q.shape(2) != e ||
        q.data().size() != static_cast<size_t>(b * q.shape(1) * e) * element) {
      return false;
    }
    total += q.shape(1);
  }
  std::string data;
  data.reserve(static_cast<size_t>(b * total * e) * element);
  for (int64_t row = 0; row < b; ++row) {
    for (const auto& s : steps) {
      const size_t row_bytes = static_cast<size_t>(s.query().shape(1) * e) * element;
      data.append(s.query().data(), static_cast<size_t>(row) * row_bytes, row_bytes);
    }
  }
  out->set_dtype(first.dtype());
  for (int64_t d : {b, total, e}) out->add_shape(d);
  out->set_data(std::move(data));
  return true;
}

}  // namespace

std::string NewClientSessionId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "c-%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

DecodingSession::DecodingSession(AttentionClient* client, v1::OpenSessionRequest open,
                                 DecodingSessionOptions options)
    : client_(client), open_(std::move(open)), options_(options) {}

DecodingSession::~DecodingSession() { (void)FinishStream(); }

StatusOr<std::unique_ptr<DecodingSession>> DecodingSession::Open(AttentionClient* client,
                                                                 v1::OpenSessionRequest open,
                                                                 DecodingSessionOptions options) {
  if (open.session_id().empty()) open.set_session_id(NewClientSessionId());
  std::unique_ptr<DecodingSession> session(new DecodingSession(client, std::move(open), options));
  MHA_RETURN_IF_ERROR(session->OpenOnServer());
  return session;
}

Status DecodingSession::OpenOnServer() {
  // UNAVAILABLE (a replica going away, a proxy between upstreams) is retried like a step.
  std::chrono::milliseconds backoff = options_.backoff;
  for (int attempt = 1;; ++attempt) {
    auto opened = client_->OpenSession(open_, options_.timeout);
    if (opened.ok()) {
      opened_ = std::move(opened.value());
      return Status::Ok();
    }
    if (opened.status().code() != StatusCode::kUnavailable || attempt >= options_.max_attempts) {
      return opened.status();
    }
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
}

StatusOr<v1::ForwardResponse> DecodingSession::Send(const v1::ForwardRequest& step) {
  if (!options_.stream) return client_->ForwardRaw(step, options_.timeout);
  if (!stream_) {
    stream_context_ = std::make_unique<grpc::ClientContext>();
    const int64_t steps = std::max<int64_t>(1, open_.max_tokens());
    stream_ =
        client_->OpenForwardStream(stream_context_.get(), options_.timeout * (steps + 1), id());
  }
  v1::ForwardResponse response;
  if (stream_->Write(step) && stream_->Read(&response)) return response;
  const Status s = FinishStream();  // the server ended the stream: its status says why
  return s.ok() ? Unavailable("ForwardStream ended before the step was answered") : s;
}

Status DecodingSession::FinishStream() {
  if (!stream_) return Status::Ok();
  stream_->WritesDone();
  Status s = codec::FromGrpcStatus(stream_->Finish());
  stream_.reset();
  stream_context_.reset();
  return s;
}

StatusOr<v1::ForwardResponse> DecodingSession::Step(v1::ForwardRequest step) {
  step.set_session_id(id());
  const int64_t expected = tokens_ + NewTokens(step);
  std::chrono::milliseconds backoff = options_.backoff;
  for (int attempt = 1;; ++attempt) {
    auto answer = Send(step);
    if (answer.ok() && (NewTokens(step) < 0 || answer->session_tokens() == expected)) {
      tokens_ = answer->session_tokens();
      answered_.push_back(std::move(step));
      return answer;
    }
    if (!options_.resume || attempt >= options_.max_attempts) {
      if (answer.ok()) {
        return Aborted("session '" + id() + "': the server counts " +
                       std::to_string(answer->session_tokens()) + " tokens, expected " +
                       std::to_string(expected) + " (a step was applied twice)");
      }
      return answer.status();
    }
    ++stats_.retries;
    if (answer.ok() || answer.status().code() == StatusCode::kNotFound) {
      // Gone (or, with a count that disagrees, applied twice by a retry): rebuild it.
      if (Status resumed = Resume(); !resumed.ok() && resumed.code() != StatusCode::kUnavailable) {
        return resumed;
      }
      continue;
    }
    if (answer.status().code() != StatusCode::kUnavailable) return answer.status();
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
}

Status DecodingSession::Resume() {
  const auto start = std::chrono::steady_clock::now();
  (void)FinishStream();
  Status opened = OpenOnServer();
  if (opened.code() == StatusCode::kAlreadyExists) {  // a copy that counts wrong: start over
    (void)client_->CloseSession(id());
    opened = OpenOnServer();
  }
  MHA_RETURN_IF_ERROR(opened);
  tokens_ = 0;
  MHA_RETURN_IF_ERROR(Replay());
  ++stats_.resumes;
  stats_.replay_ms.push_back(Millis(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

Status DecodingSession::Replay() {
  // The cache holds keys and values only: every token's, whatever masks its step had. One
  // request carries them all when the steps agree on dtype and shape; else one per step.
  std::vector<v1::ForwardRequest> replay;
  v1::ForwardRequest all;
  if (ConcatQueries(answered_, all.mutable_query())) {
    replay.push_back(std::move(all));
  } else {
    for (const auto& s : answered_) {
      v1::ForwardRequest one;
      *one.mutable_query() = s.query();
      replay.push_back(std::move(one));
    }
  }
  for (auto& r : replay) {
    r.set_session_id(id());
    auto answer = client_->ForwardRaw(r, options_.timeout);
    if (!answer.ok()) return answer.status();
    tokens_ = answer->session_tokens();
  }
  return Status::Ok();
}

StatusOr<v1::CloseSessionResponse> DecodingSession::Close() {
  (void)FinishStream();
  return client_->CloseSession(id());
}

}  // namespace mha::client
