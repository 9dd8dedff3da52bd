#include "client/bench/server_cpu.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace mha::client {

std::string ServerCpuSource::Describe() const {
  if (pid > 0) return "pid " + std::to_string(pid);
  return metrics_url;
}

StatusOr<double> ProcCpuSeconds(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return NotFound("cannot read " + path);
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields count from the
  // last ')'. utime and stime are fields 14 and 15 (1-based), i.e. the 12th and 13th after it.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return Internal(path + ": unexpected format");
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  long long utime = -1, stime = -1;
  for (int i = 1; i <= 13 && fields >> field; ++i) {
    if (i == 12) utime = std::atoll(field.c_str());
    if (i == 13) stime = std::atoll(field.c_str());
  }
  if (utime < 0 || stime < 0) return Internal(path + ": no utime/stime");
  const long ticks = sysconf(_SC_CLK_TCK);
  return static_cast<double>(utime + stime) / static_cast<double>(ticks > 0 ? ticks : 100);
}

StatusOr<double> PrometheusSample(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, name.size(), name) != 0 || line.size() <= name.size()) continue;
    if (line[name.size()] != ' ') continue;  // another metric with this prefix, or labels
    char* end = nullptr;
    const double value = std::strtod(line.c_str() + name.size() + 1, &end);
    if (end == line.c_str() + name.size() + 1) break;
    return value;
  }
  return NotFound("no sample of " + name + " in the metrics text");
}

StatusOr<std::string> HttpGet(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) return InvalidArgument("https is not supported: " + url);
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/metrics" : rest.substr(slash);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("need host:port in " + url);
  std::string host = hostport.substr(0, colon);
  const std::string port = hostport.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Unavailable("cannot resolve " + hostport);
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return Unavailable("cannot connect to " + hostport);
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + hostport + "\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return Unavailable("cannot send to " + hostport);
    }
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  std::vector<char> buffer(1 << 16);
  for (ssize_t n; (n = recv(fd, buffer.data(), buffer.size(), 0)) > 0;) {
    answer.append(buffer.data(), static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.", 0) != 0 || body == std::string::npos) {
    return Unavailable("no HTTP answer from " + url);
  }
  const std::string status_line = answer.substr(0, answer.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return Unavailable(url + ": " + status_line);
  }
  return answer.substr(body + 4);
}

StatusOr<double> ReadServerCpuSeconds(const ServerCpuSource& source) {
  if (source.pid > 0) return ProcCpuSeconds(source.pid);
  if (source.metrics_url.empty()) return FailedPrecondition("no server CPU source");
  auto text = HttpGet(source.metrics_url);
  if (!text.ok()) return text.status();
  return PrometheusSample(*text, "process_cpu_seconds_total");
}

ServerCpuMeter::ServerCpuMeter(const ServerCpuSource& source)
    : source_(source),
      before_(source.enabled() ? ReadServerCpuSeconds(source) : StatusOr<double>(0.0)) {}

ServerCpuReport ServerCpuMeter::Finish(int64_t units) const {
  ServerCpuReport r;
  if (!source_.enabled()) return r;
  r.source = source_.Describe();
  const StatusOr<double> after = ReadServerCpuSeconds(source_);
  if (!before_.ok() || !after.ok()) {
    r.error = (!before_.ok() ? before_.status() : after.status()).ToString();
    return r;
  }
  r.measured = true;
  r.cpu_s = after.value() - before_.value();
  r.cpu_us_per_request = units > 0 ? r.cpu_s * 1e6 / static_cast<double>(units) : 0;
  return r;
}

std::string ServerCpuReportText(const ServerCpuReport& r, const char* per) {
  char buf[512];
  if (!r.measured) {
    if (r.error.empty()) return "";
    return "server cpu (" + r.source + "): not measured: " + r.error + "\n";
  }
  std::snprintf(buf, sizeof(buf), "server cpu (%s): %.1f us per %s (%.3f s)\n", r.source.c_str(),
                r.cpu_us_per_request, per, r.cpu_s);
  std::string text = buf;
  if (r.flops_per_request > 0 && r.matmul_flops_per_s > 0) {
    std::snprintf(buf, sizeof(buf),
                  "efficiency: %.1f%% (%.3f MFLOP per %s = %.1f us at one core's fp32 matmul "
                  "rate %.1f GFLOP/s, measured in this run)\n",
                  100.0 * r.efficiency, r.flops_per_request / 1e6, per,
                  r.flops_per_request / r.matmul_flops_per_s * 1e6, r.matmul_flops_per_s / 1e9);
    text += buf;
  }
  return text;
}

nlohmann::json ServerCpuJson(const ServerCpuReport& r, const std::string& per) {
  return {{"measured", r.measured},
          {"source", r.source},
          {"error", r.error},
          {"cpu_s", r.cpu_s},
          {"cpu_us_per_" + per, r.cpu_us_per_request},
          {"flops_per_" + per, r.flops_per_request},
          {"matmul_flops_per_s", r.matmul_flops_per_s},
          {"efficiency", r.efficiency}};
}

}  // namespace mha::client
