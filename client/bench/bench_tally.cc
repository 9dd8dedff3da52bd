#include "client/bench/bench_tally.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <climits>
#include <string>

#include "proto/wire/status_convert.h"

namespace mha::client {

bool ReadTimings(grpc::ByteBuffer* buffer, int64_t* queue_us, int64_t* compute_us) {
  grpc::ProtoBufferReader reader(buffer);
  google::protobuf::io::CodedInputStream input(&reader);
  input.SetTotalBytesLimit(INT_MAX);
  using google::protobuf::internal::WireFormatLite;
  const uint32_t queue_tag = WireFormatLite::MakeTag(v1::ForwardResponse::kQueueUsFieldNumber,
                                                     WireFormatLite::WIRETYPE_VARINT);
  const uint32_t compute_tag = WireFormatLite::MakeTag(v1::ForwardResponse::kComputeUsFieldNumber,
                                                       WireFormatLite::WIRETYPE_VARINT);
  for (uint32_t tag = input.ReadTag(); tag != 0; tag = input.ReadTag()) {
    uint64_t value = 0;
    if (tag == queue_tag || tag == compute_tag) {
      if (!input.ReadVarint64(&value)) return false;
      *(tag == queue_tag ? queue_us : compute_us) = static_cast<int64_t>(value);
    } else if (!WireFormatLite::SkipField(&input, tag)) {
      return false;
    }
  }
  return true;
}

namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// One length-delimited field's bytes as a sub-stream: `read` parses them, then the limit is popped.
template <typename Read>
bool ReadNested(CodedInputStream* input, Read read) {
  uint32_t length = 0;
  if (!input->ReadVarint32(&length)) return false;
  const CodedInputStream::Limit limit = input->PushLimit(static_cast<int>(length));
  const bool ok = read() && input->ConsumedEntireMessage();
  input->PopLimit(limit);
  return ok;
}

// One entry of the map<string, InferParameter> `parameters`: its key and int64_param.
bool ReadParameter(CodedInputStream* input, std::string* key, int64_t* value) {
  const uint32_t key_tag = WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  const uint32_t value_tag = WireFormatLite::MakeTag(2, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  const uint32_t int64_tag = WireFormatLite::MakeTag(2, WireFormatLite::WIRETYPE_VARINT);
  for (uint32_t tag = input->ReadTag(); tag != 0; tag = input->ReadTag()) {
    if (tag == key_tag) {
      if (!WireFormatLite::ReadString(input, key)) return false;
    } else if (tag == value_tag) {
      const bool ok = ReadNested(input, [&] {
        for (uint32_t t = input->ReadTag(); t != 0; t = input->ReadTag()) {
          uint64_t v = 0;
          if (t == int64_tag) {
            if (!input->ReadVarint64(&v)) return false;
            *value = static_cast<int64_t>(v);
          } else if (!WireFormatLite::SkipField(input, t)) {
            return false;
          }
        }
        return true;
      });
      if (!ok) return false;
    } else if (!WireFormatLite::SkipField(input, tag)) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool ReadOipTimings(grpc::ByteBuffer* buffer, int64_t* queue_us, int64_t* compute_us) {
  grpc::ProtoBufferReader reader(buffer);
  CodedInputStream input(&reader);
  input.SetTotalBytesLimit(INT_MAX);
  const uint32_t parameters_tag =
      WireFormatLite::MakeTag(4, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  for (uint32_t tag = input.ReadTag(); tag != 0; tag = input.ReadTag()) {
    if (tag != parameters_tag) {
      if (!WireFormatLite::SkipField(&input, tag)) return false;
      continue;
    }
    std::string key;
    int64_t value = 0;
    if (!ReadNested(&input, [&] { return ReadParameter(&input, &key, &value); })) return false;
    if (key == "queue_us") *queue_us = value;
    if (key == "compute_us") *compute_us = value;
  }
  return true;
}

void BenchTally::Record(const grpc::Status& s, double latency_us, grpc::ByteBuffer* response) {
  const double done_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  int64_t queue_us = 0, compute_us = 0;
  const bool timings = !s.ok() || !response ||
                       (oip_ ? ReadOipTimings(response, &queue_us, &compute_us)
                             : ReadTimings(response, &queue_us, &compute_us));
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok() && !timings) {
    ++report_.errors;
    ++report_.error_codes["BAD_RESPONSE"];
  } else if (s.ok()) {
    ++report_.ok;
    latencies_.push_back(latency_us);
    done_s_.push_back(done_s);
    if (response) {
      queue_us_.push_back(static_cast<double>(queue_us));
      compute_us_.push_back(static_cast<double>(compute_us));
    }
  } else {
    ++report_.errors;
    ++report_.error_codes[codec::GrpcCodeName(s.error_code())];
    if (report_.first_error.empty()) {
      report_.first_error =
          std::string(codec::GrpcCodeName(s.error_code())) + ": " + s.error_message();
    }
  }
}

BenchReport BenchTally::Finish(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  BenchReport r = report_;
  r.seconds = seconds;
  r.throughput = seconds > 0 ? r.ok / seconds : 0;
  r.sample_latency_us = latencies_;  // in answer order: each stays beside its answer time
  r.sample_done_s = done_s_;
  r.latency = SummarizeLatencies(latencies_);
  r.server_queue = SummarizeLatencies(queue_us_);
  r.server_compute = SummarizeLatencies(compute_us_);
  return r;
}

}  // namespace mha::client
