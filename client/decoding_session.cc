#include "client/decoding_session.h"

#include <cstdio>
#include <cstdlib>
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

// Tokens [from, T) of every row of a [B, T, E] query; false when from is past T.
bool TailOf(const v1::Tensor& query, int64_t from, v1::Tensor* out) {
  const int64_t b = query.shape(0), t = query.shape(1), e = query.shape(2);
  if (from < 0 || from > t) return false;
  const size_t element = codec::ElementSize(query.dtype());
  const size_t token = static_cast<size_t>(e) * element;
  std::string data;
  for (int64_t row = 0; row < b; ++row) {
    const size_t begin = (static_cast<size_t>(row * t) + static_cast<size_t>(from)) * token;
    data.append(query.data(), begin, static_cast<size_t>(t - from) * token);
  }
  out->set_dtype(query.dtype());
  for (int64_t d : {b, t - from, e}) out->add_shape(d);
  out->set_data(std::move(data));
  return true;
}

// N of a refusal that says "[session_tokens=N]" (a session restored from the shared KV store with
// N tokens per row), or -1.
int64_t RestoredTokens(const Status& status) {
  if (status.code() != StatusCode::kAborted) return -1;
  const std::string tag = "[session_tokens=";
  const size_t at = status.message().find(tag);
  if (at == std::string::npos) return -1;
  return std::strtoll(status.message().c_str() + at + tag.size(), nullptr, 10);
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
    if (const int64_t held = RestoredTokens(answer.status()); held >= 0) {
      // Restored from what a lost replica wrote: the tail again, then this step.
      if (Status resynced = Resync(held); !resynced.ok()) {
        // A tail it cannot cut (steps of different shapes): the whole session again.
        if (Status resumed = Resume();
            !resumed.ok() && resumed.code() != StatusCode::kUnavailable) {
          return resumed;
        }
      }
      continue;
    }
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

Status DecodingSession::Resync(int64_t held) {
  const auto start = std::chrono::steady_clock::now();
  if (held > tokens_) {
    return Aborted("session '" + id() + "': the server holds " + std::to_string(held) +
                   " tokens, this client answered " + std::to_string(tokens_));
  }
  tokens_ = held;
  MHA_RETURN_IF_ERROR(Replay(held));
  ++stats_.resyncs;
  stats_.replay_ms.push_back(Millis(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

Status DecodingSession::Replay(int64_t from) {
  // The cache holds keys and values only: every token's, whatever masks its step had. One
  // request carries them all when the steps agree on dtype and shape; else one per step (a tail
  // that starts inside a step needs the one request).
  std::vector<v1::ForwardRequest> replay;
  v1::ForwardRequest all;
  if (ConcatQueries(answered_, all.mutable_query())) {
    v1::ForwardRequest tail;
    if (!TailOf(all.query(), from, tail.mutable_query())) {
      return Aborted("session '" + id() + "': cannot replay from token " + std::to_string(from));
    }
    stats_.replayed_tokens += tail.query().shape(1);
    if (tail.query().shape(1) > 0) replay.push_back(std::move(tail));
  } else if (from > 0) {
    return Aborted("session '" + id() + "': its steps differ in shape; cannot replay from token " +
                   std::to_string(from));
  } else {
    for (const auto& s : answered_) {
      v1::ForwardRequest one;
      *one.mutable_query() = s.query();
      stats_.replayed_tokens += std::max<int64_t>(0, NewTokens(s));
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
  auto closed = client_->CloseSession(id());
  if (closed.ok() || !options_.resume || closed.status().code() != StatusCode::kNotFound) {
    return closed;
  }
  // The replica that owns the id's hash now does not hold it (a replica joined and the hash moved,
  // or the replica was lost): nothing is open there to close. A copy left on another replica ends
  // by its idle timeout. Counted; the answer has no tokens or blocks to report.
  ++stats_.closes_elsewhere;
  return v1::CloseSessionResponse();
}

}  // namespace mha::client
