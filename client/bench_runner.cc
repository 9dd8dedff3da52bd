#include "bench_runner.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "status_convert.h"

namespace mha::client {
namespace {

using Clock = std::chrono::steady_clock;

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank > 0 ? rank - 1 : 0)];
}

// queue_us and compute_us of a serialized ForwardResponse, reading nothing else: the tensors
// are skipped in place (no copy), which keeps the load generator light on a shared box.
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

class ClosedLoop {
 public:
  ClosedLoop(AttentionClient& client, const v1::ForwardRequest& request,
             const BenchOptions& options)
      : client_(client),
        generic_(client.channel()),
        options_(options),
        lanes_(options.concurrency) {
    ping_request_.set_name(request.model());
    // Serialized once: every call sends the same bytes (the server still parses each one).
    const std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    request_bytes_ = grpc::ByteBuffer(&slice, 1);
  }

  BenchReport Run() {
    start_ = Clock::now();
    end_ = start_ + std::chrono::microseconds(static_cast<int64_t>(options_.duration_s * 1e6));
    active_ = static_cast<int>(lanes_.size());
    for (auto& lane : lanes_) Issue(&lane);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return active_ == 0; });
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    std::sort(latencies_.begin(), latencies_.end());
    report_.seconds = seconds;
    report_.throughput = seconds > 0 ? report_.ok / seconds : 0;
    if (!latencies_.empty()) {
      double sum = 0;
      for (double v : latencies_) sum += v;
      report_.latency_mean_us = sum / latencies_.size();
      report_.latency_p50_us = Percentile(latencies_, 50);
      report_.latency_p90_us = Percentile(latencies_, 90);
      report_.latency_p99_us = Percentile(latencies_, 99);
      report_.latency_max_us = latencies_.back();
    }
    if (report_.ok > 0) {
      report_.server_queue_mean_us = queue_sum_ / report_.ok;
      report_.server_compute_mean_us = compute_sum_ / report_.ok;
    }
    return report_;
  }

 private:
  struct Lane {
    std::unique_ptr<grpc::ClientContext> context;  // one per call, replaced by the next call
    grpc::ByteBuffer response;
    v1::ModelInfo info;  // --ping
    Clock::time_point start;
  };

  // Claims the next request slot; false when the run is over.
  bool Claim() {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.requests > 0) {
      if (issued_ >= options_.requests) return false;
    } else if (Clock::now() >= end_) {
      return false;
    }
    ++issued_;
    return true;
  }

  void Issue(Lane* lane) {
    if (!Claim()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) cv_.notify_all();
      return;
    }
    lane->response.Clear();
    // The previous call's callback has run (we are in it, or it never existed): safe to replace.
    lane->context = std::make_unique<grpc::ClientContext>();
    lane->start = Clock::now();
    auto done = [this, lane](grpc::Status s) { OnDone(lane, s); };
    if (options_.ping) {
      client_.GetModelAsync(lane->context.get(), &ping_request_, &lane->info, options_.timeout,
                            std::move(done));
    } else {
      lane->context->set_deadline(std::chrono::system_clock::now() + options_.timeout);
      generic_.UnaryCall(lane->context.get(), "/mha.v1.AttentionService/Forward",
                         grpc::StubOptions(), &request_bytes_, &lane->response, std::move(done));
    }
  }

  void OnDone(Lane* lane, const grpc::Status& s) {
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - lane->start).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t queue_us = 0, compute_us = 0;
      if (s.ok() && !options_.ping && !ReadTimings(&lane->response, &queue_us, &compute_us)) {
        ++report_.errors;
        ++report_.error_codes["BAD_RESPONSE"];
      } else if (s.ok()) {
        ++report_.ok;
        latencies_.push_back(us);
        queue_sum_ += queue_us;
        compute_sum_ += compute_us;
      } else {
        ++report_.errors;
        ++report_.error_codes[codec::GrpcCodeName(s.error_code())];
        if (report_.first_error.empty()) {
          report_.first_error =
              std::string(codec::GrpcCodeName(s.error_code())) + ": " + s.error_message();
        }
      }
    }
    Issue(lane);  // closed loop: next request right away
  }

  AttentionClient& client_;
  grpc::GenericStub generic_;
  grpc::ByteBuffer request_bytes_;
  v1::GetModelRequest ping_request_;
  const BenchOptions options_;
  std::vector<Lane> lanes_;
  std::mutex mu_;
  std::condition_variable cv_;
  int active_ = 0;
  int64_t issued_ = 0;
  Clock::time_point start_, end_;
  std::vector<double> latencies_;
  double queue_sum_ = 0, compute_sum_ = 0;
  BenchReport report_;
};

}  // namespace

BenchReport RunBench(AttentionClient& client, const v1::ForwardRequest& request,
                     const BenchOptions& options) {
  for (int64_t i = 0; i < options.warmup; ++i) {
    if (options.ping) {
      (void)client.GetModel(request.model());
    } else {
      (void)client.ForwardRaw(request, options.timeout);
    }
  }
  BenchOptions o = options;
  o.concurrency = std::max(1, o.concurrency);
  ClosedLoop loop(client, request, o);
  return loop.Run();
}

std::string BenchReportText(const BenchReport& r) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "requests: %lld ok, %lld errors in %.2f s\n"
                "throughput: %.2f req/s\n"
                "latency (ms): mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n"
                "server mean (ms): queue %.3f  compute %.3f\n",
                static_cast<long long>(r.ok), static_cast<long long>(r.errors), r.seconds,
                r.throughput, r.latency_mean_us / 1e3, r.latency_p50_us / 1e3,
                r.latency_p90_us / 1e3, r.latency_p99_us / 1e3, r.latency_max_us / 1e3,
                r.server_queue_mean_us / 1e3, r.server_compute_mean_us / 1e3);
  std::string text = buf;
  for (const auto& [code, count] : r.error_codes) {
    text += "errors " + code + ": " + std::to_string(count) + "\n";
  }
  if (!r.first_error.empty()) text += "first error: " + r.first_error + "\n";
  return text;
}

std::string BenchReportJson(const BenchReport& r) {
  nlohmann::json j = {
      {"ok", r.ok},
      {"errors", r.errors},
      {"error_codes", r.error_codes},
      {"first_error", r.first_error},
      {"seconds", r.seconds},
      {"throughput_rps", r.throughput},
      {"latency_us",
       {{"mean", r.latency_mean_us},
        {"p50", r.latency_p50_us},
        {"p90", r.latency_p90_us},
        {"p99", r.latency_p99_us},
        {"max", r.latency_max_us}}},
      {"server_queue_mean_us", r.server_queue_mean_us},
      {"server_compute_mean_us", r.server_compute_mean_us},
  };
  return j.dump();
}

}  // namespace mha::client
