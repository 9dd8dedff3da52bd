// The echo floor and its anchors (docs/performance.md): what the transport alone costs on this
// machine. Echo servers (bench/echo_servers.h: mha-server's gRPC stack, gRPC's own callback-API
// example, gRPC's own completion-queue example) answer every ForwardRequest of B=1, T=16, E=512
// fp32 (32 KiB) with a ForwardResponse holding the same bytes and compute nothing; each runs in a
// child forked before anything touches gRPC, driven by mha-client bench's own load generator
// (client/bench_runner.h), its CPU read from /proc/PID/stat.
//
//   mha_echo_floor                     mha-server's stack at c=1 and c=32: p50, p99, req/s and the
//                                      server's CPU per request
//   mha_echo_floor --anchors           the six servers side by side (all started at once,
//                                      measured in turn, --rounds times), one table of medians and
//                                      the ratio mha / the better bare server
//                                      (bench/run_all.py's anchors row)
//   mha_echo_floor --serve [--server mha|mha-before|callback|async|async+health|handoff] [--address
//   127.0.0.1:0]
//   [--port-file F]
//                                      serve only (for mha-client bench --server-pid)
// Options: --server KIND (default mha), -n REQUESTS (per run, default 4000; --anchors: c=1 runs
// get a quarter), -c C (one run at C instead of 1 and 32), --rounds R (default 3), --json.
// Torch-free.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/echo_servers.h"
#include "client/bench/bench_runner.h"
#include "client/mha_client.h"

namespace {

using mha::bench::EchoServerKind;

constexpr int64_t kBatch = 1, kSeq = 16, kEmbed = 512;

struct Options {
  bool serve = false, json = false, anchors = false;
  EchoServerKind kind = EchoServerKind::kMhaFloor;
  std::string address = "127.0.0.1:0", port_file;
  int64_t requests = 4000;
  int concurrency = 0;
  int rounds = 3;
};

// A forked echo server: its pid and port (0 when it did not start).
struct Child {
  EchoServerKind kind;
  pid_t pid = -1;
  int port = 0;
};

Child Fork(EchoServerKind kind, const std::string& address) {
  Child child{kind};
  int fds[2];
  if (pipe(fds) != 0) return child;
  child.pid = fork();
  if (child.pid < 0) return child;
  if (child.pid == 0) {
    close(fds[0]);
    _exit(mha::bench::ServeEcho(kind, address, "", fds[1]));
  }
  close(fds[1]);
  char buf[32] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  child.port = n > 0 ? std::atoi(buf) : 0;
  return child;
}

void Stop(const Child& child) {
  if (child.pid <= 0) return;
  kill(child.pid, SIGTERM);
  int status = 0;
  waitpid(child.pid, &status, 0);
}

mha::v1::ForwardRequest MakeRequest() {
  mha::v1::ForwardRequest request;
  auto* query = request.mutable_query();
  query->set_dtype(mha::v1::FLOAT32);
  for (int64_t d : {kBatch, kSeq, kEmbed}) query->add_shape(d);
  std::vector<float> values(static_cast<size_t>(kBatch * kSeq * kEmbed));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  query->set_data(values.data(), values.size() * sizeof(float));
  return request;
}

// Context switches (voluntary + involuntary) of all of `pid`'s threads so far, from
// /proc/PID/task/*/status: how often the server's threads hand a call to each other.
int64_t ContextSwitches(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) return 0;
  int64_t total = 0;
  while (const dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream status(dir + "/" + e->d_name + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 ||
          line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
        total += std::atoll(line.substr(line.find(':') + 1).c_str());
      }
    }
  }
  closedir(tasks);
  return total;
}

// One closed-loop run of `requests` calls at concurrency `c` against `child`; false on errors.
// `switches`: the server's context switches per call (the warmup's calls counted in).
bool Measure(const Child& child, int c, int64_t requests, mha::client::BenchReport* report,
             double* switches = nullptr) {
  mha::client::ClientOptions options;
  options.target = "127.0.0.1:" + std::to_string(child.port);
  mha::client::AttentionClient client(options);
  mha::client::BenchOptions bench;
  bench.concurrency = c;
  bench.requests = requests;
  bench.warmup = 200;
  bench.server_cpu.pid = child.pid;
  const int64_t switches_before = ContextSwitches(child.pid);
  *report = mha::client::RunBench(client, MakeRequest(), bench);
  if (switches != nullptr) {
    *switches = static_cast<double>(ContextSwitches(child.pid) - switches_before) /
                static_cast<double>(requests + bench.warmup);
  }
  if (report->errors == 0) return true;
  std::fprintf(stderr, "echo server '%s' c=%d: %lld errors, first: %s\n",
               mha::bench::EchoServerName(child.kind), c, static_cast<long long>(report->errors),
               report->first_error.c_str());
  return false;
}

// mha-server's stack alone (run_all.py's echo row): c=1 and c=32, or -c C.
int RunFloor(const Options& o) {
  const Child child = Fork(o.kind, o.address);
  int rc = 0;
  if (child.port <= 0) {
    std::fprintf(stderr, "echo floor: the server did not start\n");
    rc = 1;
  }
  const std::vector<int> levels =
      o.concurrency > 0 ? std::vector<int>{o.concurrency} : std::vector<int>{1, 32};
  for (int c : rc == 0 ? levels : std::vector<int>{}) {
    mha::client::BenchReport r;
    if (!Measure(child, c, o.requests, &r)) rc = 1;
    if (o.json) {
      std::printf("{\"concurrency\": %d, \"server\": \"%s\", \"report\": %s}\n", c,
                  mha::bench::EchoServerName(o.kind), mha::client::BenchReportJson(r).c_str());
    } else {
      std::printf(
          "echo floor (%s) c=%d (B=1 T=16 E=512 fp32, 32 KiB each way): p50 %.1f us  p99 %.1f us  "
          "%.0f req/s  server cpu %.1f us per request\n",
          mha::bench::EchoServerName(o.kind), c, r.latency.p50_us, r.latency.p99_us, r.throughput,
          r.server_cpu.cpu_us_per_request);
    }
  }
  Stop(child);
  return rc;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Per server and concurrency: every round's CPU per call, p50 and throughput.
struct Samples {
  std::vector<double> cpu_us, p50_us, rps, switches;
};
using Table = std::vector<std::vector<Samples>>;  // [server][level]

// mha first, then the two bare servers the ratio takes the better of (callback, async).
// mha-before last (table[5]): mha-server's stack before every method moved to the queue.
const std::vector<EchoServerKind> kKinds = {EchoServerKind::kMhaFloor, EchoServerKind::kCallback,
                                            EchoServerKind::kAsync,    EchoServerKind::kAsyncHealth,
                                            EchoServerKind::kHandoff,  EchoServerKind::kMhaBefore};

// All the servers forked first (before this process touches gRPC), then measured in turn, round
// after round, so that the machine's load falls on each alike. False when one failed.
bool MeasureRounds(const Options& o, const std::vector<int>& levels, Table* table) {
  std::vector<Child> children;
  for (EchoServerKind k : kKinds) children.push_back(Fork(k, o.address));
  bool ok = true;
  for (const Child& c : children) {
    if (c.port <= 0) {
      std::fprintf(stderr, "echo server '%s' did not start\n", mha::bench::EchoServerName(c.kind));
      ok = false;
    }
  }
  table->assign(kKinds.size(), std::vector<Samples>(levels.size()));
  for (int round = 0; ok && round < o.rounds; ++round) {
    for (size_t s = 0; s < children.size(); ++s) {
      for (size_t l = 0; l < levels.size(); ++l) {
        mha::client::BenchReport r;
        const int64_t n = levels[l] == 1 ? std::max<int64_t>(500, o.requests / 4) : o.requests;
        double switches = 0;
        if (!Measure(children[s], levels[l], n, &r, &switches)) ok = false;
        (*table)[s][l].switches.push_back(switches);
        (*table)[s][l].cpu_us.push_back(r.server_cpu.cpu_us_per_request);
        (*table)[s][l].p50_us.push_back(r.latency.p50_us);
        (*table)[s][l].rps.push_back(r.throughput);
      }
    }
  }
  for (const Child& c : children) Stop(c);
  return ok;
}

// The table of medians, then the ratio of mha's CPU per call to the better bare server's; the
// same as one JSON object with --json.
void PrintTable(const Options& o, const std::vector<int>& levels, const Table& table) {
  std::string json = "{\"rounds\": " + std::to_string(o.rounds) + ", \"servers\": {";
  std::printf("echo servers, B=1 T=16 E=512 fp32 (32 KiB each way), medians of %d rounds\n",
              o.rounds);
  std::printf("%-12s", "server");
  for (int c : levels) std::printf(" | c=%-2d cpu us/call  p50 us   req/s  cs/call", c);
  std::printf("\n");
  for (size_t s = 0; s < kKinds.size(); ++s) {
    const char* name = mha::bench::EchoServerName(kKinds[s]);
    std::printf("%-12s", name);
    json += std::string(s ? ", " : "") + "\"" + name + "\": {";
    for (size_t l = 0; l < levels.size(); ++l) {
      const Samples& x = table[s][l];
      std::printf(" | %19.1f %7.1f %7.0f %8.2f", Median(x.cpu_us), Median(x.p50_us), Median(x.rps),
                  Median(x.switches));
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "%s\"c%d\": {\"cpu_us\": %.2f, \"p50_us\": %.1f, \"rps\": %.1f, "
                    "\"switches_per_call\": %.2f}",
                    l ? ", " : "", levels[l], Median(x.cpu_us), Median(x.p50_us), Median(x.rps),
                    Median(x.switches));
      json += buf;
    }
    std::printf("\n");
    json += "}";
  }
  // mha (table[0]) and mha-before (table[5]) against the better bare server; mha-before against
  // async+health (table[3]): what the earlier stack, with gRPC's health service, paid for gRPC's
  // callback-queue pollers whatever its own code did.
  struct Ratio {
    const char *key, *label;
    size_t server;
    bool vs_health;
  };
  for (const Ratio& r :
       {Ratio{"ratio", "mha / better bare server", 0, false},
        Ratio{"ratio_before", "mha-before / better bare server", 5, false},
        Ratio{"ratio_before_vs_async_health", "mha-before / async+health", 5, true}}) {
    json += std::string("}, \"") + r.key + "\": {";
    std::printf("%s, server cpu per call:", r.label);
    for (size_t l = 0; l < levels.size(); ++l) {
      const double bare = r.vs_health
                              ? Median(table[3][l].cpu_us)
                              : std::min(Median(table[1][l].cpu_us), Median(table[2][l].cpu_us));
      const double ratio = bare > 0 ? Median(table[r.server][l].cpu_us) / bare : 0;
      std::printf("  c=%d %.2fx", levels[l], ratio);
      json += std::string(l ? ", " : "") + "\"c" + std::to_string(levels[l]) +
              "\": " + std::to_string(ratio);
    }
    std::printf("\n");
  }
  if (o.json) std::printf("%s}}\n", json.c_str());
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--anchors [--rounds R]] [--serve [--address HOST:PORT] [--port-file F]] "
               "[--server mha|mha-before|callback|async|async+health|handoff] [-n REQUESTS] [-c C] "
               "[--json]\n",
               argv0);
  return 2;
}

int RunAnchors(const Options& o) {
  const std::vector<int> levels =
      o.concurrency > 0 ? std::vector<int>{o.concurrency} : std::vector<int>{1, 32};
  Table table;
  if (!MeasureRounds(o, levels, &table)) return 1;
  PrintTable(o, levels, table);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--serve") {
      o.serve = true;
    } else if (a == "--anchors") {
      o.anchors = true;
    } else if (a == "--server") {
      if (!mha::bench::ParseEchoServerKind(next(), &o.kind)) return Usage(argv[0]);
    } else if (a == "--address") {
      o.address = next();
    } else if (a == "--port-file") {
      o.port_file = next();
    } else if (a == "-n" || a == "--requests") {
      o.requests = std::atoll(next().c_str());
    } else if (a == "-c" || a == "--concurrency") {
      o.concurrency = std::atoi(next().c_str());
    } else if (a == "--rounds") {
      o.rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--json") {
      o.json = true;
    } else {
      return Usage(argv[0]);
    }
  }
  if (o.serve) return mha::bench::ServeEcho(o.kind, o.address, o.port_file, -1);
  return o.anchors ? RunAnchors(o) : RunFloor(o);
}
