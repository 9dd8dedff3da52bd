#include "client/bench/bench_runner.h"

#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "client/bench/bench_tally.h"
#include "client/oip_translate.h"

namespace mha::client {
namespace {

using Clock = std::chrono::steady_clock;

// One call's deadline: the fixed timeout, or drawn from [deadline_min, deadline_max].
std::chrono::microseconds CallTimeout(const BenchOptions& o, std::mt19937_64& rng) {
  if (o.deadline_max.count() <= 0) return o.timeout;
  const auto lo = std::chrono::duration_cast<std::chrono::microseconds>(o.deadline_min).count();
  const auto hi = std::chrono::duration_cast<std::chrono::microseconds>(o.deadline_max).count();
  return std::chrono::microseconds(
      std::uniform_int_distribution<int64_t>(std::min(lo, hi), std::max(lo, hi))(rng));
}

// Serialized once: every call sends the same bytes (the server still parses each one). With
// --protocol oip each request is sent as the ModelInferRequest that oip_translate makes of it (an
// untranslatable one is sent empty, and its error counted).
// With --shm (options.shm) the requests name the shared-memory regions instead.
std::vector<grpc::ByteBuffer> Serialize(const std::vector<v1::ForwardRequest>& requests,
                                        WireProtocol protocol, const ShmRegions* shm) {
  std::vector<grpc::ByteBuffer> buffers;
  for (size_t i = 0; i < requests.size(); ++i) {
    const v1::ForwardRequest& request = requests[i];
    std::string bytes = request.SerializeAsString();
    if (protocol == WireProtocol::kNative && shm != nullptr) {
      v1::ForwardRequest placed = request;
      bytes = shm->RewriteV1(i, &placed).ok() ? placed.SerializeAsString() : std::string();
    }
    if (protocol == WireProtocol::kOip) {
      auto infer = ToModelInferRequest(request);
      if (infer.ok() && shm != nullptr && !shm->Rewrite(i, &infer.value()).ok()) {
        infer = InvalidArgument("--shm");
      }
      bytes = infer.ok() ? infer->SerializeAsString() : std::string();
    }
    grpc::Slice slice(bytes);
    buffers.emplace_back(&slice, 1);
  }
  return buffers;
}

const char* ForwardMethod(WireProtocol protocol) {
  return protocol == WireProtocol::kOip ? "/inference.GRPCInferenceService/ModelInfer"
                                        : "/mha.v1.AttentionService/Forward";
}

class ClosedLoop {
 public:
  ClosedLoop(AttentionClient& client, const std::vector<v1::ForwardRequest>& requests,
             const BenchOptions& options)
      : client_(client),
        generic_(client.channel()),
        options_(options),
        lanes_(options.concurrency),
        requests_(Serialize(requests, client.options().protocol, options.shm)),
        method_(ForwardMethod(client.options().protocol)),
        rng_(options.seed),
        tally_(client.options().protocol == WireProtocol::kOip) {
    ping_request_.set_name(requests.front().model());
  }

  BenchReport Run() {
    start_ = Clock::now();
    tally_.Start();
    end_ = start_ + std::chrono::microseconds(static_cast<int64_t>(options_.duration_s * 1e6));
    active_ = static_cast<int>(lanes_.size());
    for (auto& lane : lanes_) Issue(&lane);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return active_ == 0; });
    }
    return tally_.Finish(std::chrono::duration<double>(Clock::now() - start_).count());
  }

 private:
  struct Lane {
    std::unique_ptr<grpc::ClientContext> context;  // one per call, replaced by the next call
    grpc::ByteBuffer response;
    v1::ModelInfo info;  // --ping
    Clock::time_point start;
  };

  // Claims the next request slot (and picks its request and deadline); false when the run is over.
  bool Claim(size_t* pick, std::chrono::microseconds* timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.requests > 0) {
      if (issued_ >= options_.requests) return false;
    } else if (Clock::now() >= end_) {
      return false;
    }
    ++issued_;
    *pick = requests_.size() > 1 ? rng_() % requests_.size() : 0;
    *timeout = CallTimeout(options_, rng_);
    return true;
  }

  void Issue(Lane* lane) {
    size_t pick = 0;
    std::chrono::microseconds timeout{0};
    if (!Claim(&pick, &timeout)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) cv_.notify_all();
      return;
    }
    lane->response.Clear();
    // The previous call's callback has run (we are in it, or it never existed): safe to replace.
    lane->context = std::make_unique<grpc::ClientContext>();
    lane->start = Clock::now();
    auto done = [this, lane](const grpc::Status& s) { OnDone(lane, s); };
    if (options_.ping) {
      client_.GetModelAsync(lane->context.get(), &ping_request_, &lane->info, options_.timeout,
                            std::move(done));
    } else {
      lane->context->set_deadline(std::chrono::system_clock::now() + timeout);
      generic_.UnaryCall(lane->context.get(), method_, grpc::StubOptions(), &requests_[pick],
                         &lane->response, std::move(done));
    }
  }

  void OnDone(Lane* lane, const grpc::Status& s) {
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - lane->start).count();
    tally_.Record(s, us, options_.ping ? nullptr : &lane->response);
    Issue(lane);  // closed loop: next request right away
  }

  AttentionClient& client_;
  grpc::GenericStub generic_;
  v1::GetModelRequest ping_request_;
  const BenchOptions options_;
  std::vector<Lane> lanes_;
  const std::vector<grpc::ByteBuffer> requests_;
  const std::string method_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;
  int active_ = 0;
  int64_t issued_ = 0;
  Clock::time_point start_, end_;
  BenchTally tally_;
};

// Open loop: one sender thread issues calls at the scheduled times; answers arrive on gRPC's
// threads. Every call's state lives until the end of the run (answers are cleared on arrival).
class OpenLoop {
 public:
  OpenLoop(AttentionClient& client, const std::vector<v1::ForwardRequest>& requests,
           const BenchOptions& options)
      : generic_(client.channel()),
        options_(options),
        requests_(Serialize(requests, client.options().protocol, options.shm)),
        method_(ForwardMethod(client.options().protocol)),
        tally_(client.options().protocol == WireProtocol::kOip) {}

  BenchReport Run() {
    std::mt19937_64 rng(options_.seed);
    std::exponential_distribution<double> gap_s(options_.rate);
    const auto start = Clock::now();
    tally_.Start();
    const auto end =
        start + std::chrono::microseconds(static_cast<int64_t>(options_.duration_s * 1e6));
    double offset_s = 0;
    int64_t sent = 0;
    for (;; ++sent) {
      if (options_.requests > 0 && sent >= options_.requests) break;
      const auto when = start + std::chrono::microseconds(static_cast<int64_t>(offset_s * 1e6));
      if (options_.requests == 0 && when >= end) break;
      std::this_thread::sleep_until(when);
      calls_.emplace_back();
      Call* call = &calls_.back();  // std::deque: stays put while more are added
      call->intended = when;
      call->context.set_deadline(std::chrono::system_clock::now() + CallTimeout(options_, rng));
      const size_t pick = requests_.size() > 1 ? rng() % requests_.size() : 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++outstanding_;
      }
      generic_.UnaryCall(&call->context, method_, grpc::StubOptions(), &requests_[pick],
                         &call->response, [this, call](const grpc::Status& s) { OnDone(call, s); });
      offset_s += options_.poisson ? gap_s(rng) : 1.0 / options_.rate;
    }
    const double send_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return outstanding_ == 0; });
    }
    BenchReport report = tally_.Finish(std::chrono::duration<double>(Clock::now() - start).count());
    report.offered_rate = send_seconds > 0 ? sent / send_seconds : 0;
    return report;
  }

 private:
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer response;
    Clock::time_point intended;
  };

  void OnDone(Call* call, const grpc::Status& s) {
    const double us =
        std::chrono::duration<double, std::micro>(Clock::now() - call->intended).count();
    tally_.Record(s, us, &call->response);
    call->response.Clear();
    std::lock_guard<std::mutex> lock(mu_);
    if (--outstanding_ == 0) cv_.notify_all();
  }

  grpc::GenericStub generic_;
  const BenchOptions options_;
  const std::vector<grpc::ByteBuffer> requests_;
  const std::string method_;
  std::deque<Call> calls_;  // touched by the sender thread only
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t outstanding_ = 0;
  BenchTally tally_;
};

}  // namespace

BenchReport RunBench(AttentionClient& client, const std::vector<v1::ForwardRequest>& requests,
                     const BenchOptions& options) {
  if (requests.empty()) return BenchReport();
  for (int64_t i = 0; i < options.warmup; ++i) {
    const v1::ForwardRequest& request = requests[i % requests.size()];
    if (options.ping) {
      (void)client.GetModel(request.model());
    } else {
      (void)client.ForwardRaw(request, options.timeout);
    }
  }
  BenchOptions o = options;
  o.concurrency = std::max(1, o.concurrency);
  const ServerCpuMeter cpu(o.server_cpu);
  BenchReport report;
  if (o.rate > 0 && !o.ping) {
    report = OpenLoop(client, requests, o).Run();
  } else {
    ClosedLoop loop(client, requests, o);
    report = loop.Run();
  }
  report.server_cpu = cpu.Finish(report.ok);
  return report;
}

std::string BenchReportText(const BenchReport& r) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "requests: %lld ok, %lld errors in %.2f s\n"
                "throughput: %.2f req/s\n"
                "latency (ms): mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n"
                "server (ms): queue mean %.3f p50 %.3f  compute mean %.3f p50 %.3f\n",
                static_cast<long long>(r.ok), static_cast<long long>(r.errors), r.seconds,
                r.throughput, r.latency.mean_us / 1e3, r.latency.p50_us / 1e3,
                r.latency.p90_us / 1e3, r.latency.p99_us / 1e3, r.latency.max_us / 1e3,
                r.server_queue.mean_us / 1e3, r.server_queue.p50_us / 1e3,
                r.server_compute.mean_us / 1e3, r.server_compute.p50_us / 1e3);
  std::string text = buf;
  if (r.offered_rate > 0) {
    std::snprintf(buf, sizeof(buf), "open loop: offered %.2f req/s\n", r.offered_rate);
    text += buf;
  }
  for (const auto& [code, count] : r.error_codes) {
    text += "errors " + code + ": " + std::to_string(count) + "\n";
  }
  text += ServerCpuReportText(r.server_cpu);
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
      {"latency_us", LatencyJson(r.latency)},
      {"server_queue_mean_us", r.server_queue.mean_us},
      {"server_compute_mean_us", r.server_compute.mean_us},
      {"server_queue_p50_us", r.server_queue.p50_us},
      {"server_compute_p50_us", r.server_compute.p50_us},
      {"offered_rate_rps", r.offered_rate},
      {"server_cpu", ServerCpuJson(r.server_cpu)},
  };
  return j.dump();
}

}  // namespace mha::client
