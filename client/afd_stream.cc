#include "client/afd_stream.h"

#include <cstring>
#include <random>
#include <utility>

#include "proto/wire/status_convert.h"

namespace mha::client {

AfdStream::AfdStream(AttentionClient& client, std::vector<std::string> ids, int64_t layers,
                     const StandInFfn& ffn, uint64_t seed, std::chrono::milliseconds timeout,
                     int64_t messages)
    : client_(client),
      ids_(std::move(ids)),
      layers_(layers),
      ffn_(ffn),
      e_(ffn.embed_dim()),
      h_(ids_.size() * static_cast<size_t>(e_)) {
  tally_.round_trip_us.resize(static_cast<size_t>(layers));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : h_) x = normal(rng);  // each session's first embedding stand-in
  stream_ = client_.OpenLayerSteps(&context_, timeout * (messages + 1));
}

AfdStream::~AfdStream() { Finish(); }

void AfdStream::Fail(const Status& status) {
  if (tally_.first_error.ok()) tally_.first_error = status;
  broken_ = true;
}

void AfdStream::Finish() {
  if (!stream_) return;
  stream_->WritesDone();
  const Status s = codec::FromGrpcStatus(stream_->Finish());
  stream_.reset();
  if (!s.ok() && tally_.first_error.ok()) tally_.first_error = s;
}

void AfdStream::Token(int64_t tokens, bool timed) {
  const int64_t sessions = static_cast<int64_t>(ids_.size());
  if (broken_ || !stream_) {
    tally_.failed_steps += sessions;
    return;
  }
  // Each session's rows of this token: a chunk repeats the stand-in embedding with a small ramp
  // (distinct rows); a decode step continues from the last row of the previous token.
  const int64_t before = static_cast<int64_t>(h_.size()) / (sessions * e_);
  std::vector<float> rows(static_cast<size_t>(sessions * tokens * e_));
  for (int64_t i = 0; i < sessions; ++i) {
    const float* last = h_.data() + ((i + 1) * before - 1) * e_;
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = rows.data() + (i * tokens + t) * e_;
      for (int64_t j = 0; j < e_; ++j) row[j] = last[j] + 0.01f * static_cast<float>(t);
    }
  }
  h_ = std::move(rows);
  for (int64_t layer = 0; layer < layers_; ++layer) {
    const Status s = Layer(layer, tokens, timed);
    if (!s.ok()) {
      ++tally_.failed_messages;
      tally_.failed_steps += sessions;
      return Fail(s);
    }
    ++tally_.messages;
  }
  if (timed) tally_.steps += sessions;
}

Status AfdStream::Layer(int64_t layer, int64_t tokens, bool timed) {
  v1::LayerStepRequest request;
  request.set_id("m" + std::to_string(next_id_++));
  request.set_layer(layer);
  const size_t n = static_cast<size_t>(tokens * e_);  // one session's values
  std::vector<float> x(h_.size());
  ffn_.RmsNorm(h_.data(), x.data(), static_cast<int64_t>(ids_.size()) * tokens);
  for (size_t i = 0; i < ids_.size(); ++i) {
    v1::LayerStepEntry* entry = request.add_entries();
    entry->set_session_id(ids_[i]);
    SetHidden(i, tokens, x.data() + i * n, entry);
  }
  v1::LayerStepResponse response;
  const auto start = std::chrono::steady_clock::now();
  if (!stream_->Write(request) || !stream_->Read(&response)) {
    Finish();  // the server ended the stream: its status says why
    return tally_.first_error.ok() ? Internal("LayerSteps ended before the message was answered")
                                   : tally_.first_error;
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (response.has_error()) {
    return Status(static_cast<StatusCode>(response.error().code()),
                  "layer " + std::to_string(layer) + ": " + response.error().message());
  }
  if (response.id() != request.id() || response.outputs_size() != request.entries_size()) {
    return Internal("answer '" + response.id() + "' with " +
                    std::to_string(response.outputs_size()) + " outputs for message '" +
                    request.id() + "' of " + std::to_string(request.entries_size()) + " entries");
  }
  if (timed) {
    tally_.round_trip_us[static_cast<size_t>(layer)].push_back(us);
    tally_.pass_messages.push_back(static_cast<double>(response.pass_messages()));
    tally_.pass_entries.push_back(static_cast<double>(response.pass_entries()));
    tally_.compute_us.push_back(static_cast<double>(response.compute_us()));
  }
  const auto ffn_start = std::chrono::steady_clock::now();
  std::vector<float> o(n);
  for (size_t i = 0; i < ids_.size(); ++i) {
    MHA_RETURN_IF_ERROR(Output(response, i, tokens, o.data()));
    float* h = h_.data() + i * n;
    for (size_t k = 0; k < n; ++k) h[k] += o[k];
    for (size_t k = 0; k < n; ++k) tally_.output_sum += o[k];
  }
  ffn_.Apply(h_.data(), static_cast<int64_t>(ids_.size()) * tokens);  // W read once per layer
  tally_.ffn_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - ffn_start).count();
  return Status::Ok();
}

Status AfdStream::UseSharedMemory(inference::GRPCInferenceService::StubInterface* stub,
                                  int64_t max_tokens, int index) {
  const size_t bytes = ids_.size() * static_cast<size_t>(max_tokens * e_) * sizeof(float);
  const std::string name = "mha-client-afd" + std::to_string(index);
  auto in = ShmObject::Create(stub, name + "-in", bytes);
  if (!in.ok()) return in.status();
  auto out = ShmObject::Create(stub, name + "-out", bytes);
  if (!out.ok()) return out.status();
  shm_in_ = std::move(in.value());
  shm_out_ = std::move(out.value());
  return Status::Ok();
}

void AfdStream::SetHidden(size_t i, int64_t tokens, const float* x,
                          v1::LayerStepEntry* entry) const {
  const size_t bytes = static_cast<size_t>(tokens * e_) * sizeof(float);
  v1::Tensor* hidden = entry->mutable_hidden();
  hidden->set_dtype(v1::FLOAT32);
  hidden->add_shape(tokens);
  hidden->add_shape(e_);
  if (!shm_in_) {
    hidden->set_data(reinterpret_cast<const char*>(x), bytes);
    return;
  }
  std::memcpy(shm_in_->data() + i * bytes, x, bytes);
  for (auto [ref, region] : {std::pair{hidden->mutable_shared_memory(), shm_in_.get()},
                             std::pair{entry->mutable_output_shared_memory(), shm_out_.get()}}) {
    ref->set_shared_memory_region(region->name());
    ref->set_shared_memory_byte_size(bytes);
    ref->set_shared_memory_offset(i * bytes);
  }
}

Status AfdStream::Output(const v1::LayerStepResponse& response, size_t i, int64_t tokens,
                         float* o) const {
  const size_t bytes = static_cast<size_t>(tokens * e_) * sizeof(float);
  const v1::Tensor& out = response.outputs(static_cast<int>(i));
  const size_t got = shm_out_ ? out.shared_memory().shared_memory_byte_size() : out.data().size();
  if (out.dtype() != v1::FLOAT32 || got != bytes) {
    return Internal("entries[" + std::to_string(i) + "]: output is not [" + std::to_string(tokens) +
                    ", " + std::to_string(e_) + "] float32");
  }
  std::memcpy(o, shm_out_ ? shm_out_->data() + i * bytes : out.data().data(), bytes);
  return Status::Ok();
}

}  // namespace mha::client
