#include "server/app/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

namespace mha::serve {
namespace {

// One JSON object per line; the message is escaped properly.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto time = std::chrono::system_clock::to_time_t(msg.time);
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count() %
        1000;
    std::tm tm{};
    gmtime_r(&time, &tm);
    char ts[40];
    const size_t n = std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(ts + n, sizeof(ts) - n, ".%03dZ", static_cast<int>(millis));
    nlohmann::json line = {
        {"ts", ts},
        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())},
        {"thread", msg.thread_id},
    };
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

Status SetupLogging(const std::string& format, const std::string& level) {
  auto logger = std::make_shared<spdlog::logger>("mha-server",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == "json") {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else if (format == "text") {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e [%^%l%$] %v");
  } else {
    return InvalidArgument("--log-format must be text or json, got '" + format + "'");
  }
  const auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return InvalidArgument("--log-level: unknown level '" + level + "'");
  }
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace mha::serve
