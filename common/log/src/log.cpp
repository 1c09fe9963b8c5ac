#include "wisp/log/log.hpp"

#include <chrono>
#include <ctime>
#include <mutex>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace wisp::log {
namespace {

thread_local std::string t_request_id;

struct State {
  std::mutex mu;
  std::vector<spdlog::sink_ptr> sinks;
  spdlog::level::level_enum level = spdlog::level::info;
  std::string service = "wisp";
  bool json = false;
  bool initialized = false;
};

State& GetState() {
  static State* state = new State();  // never destroyed: loggers outlive static destruction order
  return *state;
}

void AppendJsonEscaped(std::string_view in, spdlog::memory_buf_t& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : in) {
    switch (c) {
      case '"':
        out.append(std::string_view("\\\""));
        break;
      case '\\':
        out.append(std::string_view("\\\\"));
        break;
      case '\n':
        out.append(std::string_view("\\n"));
        break;
      case '\r':
        out.append(std::string_view("\\r"));
        break;
      case '\t':
        out.append(std::string_view("\\t"));
        break;
      default:
        if (c < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
          out.append(esc, esc + sizeof(esc));
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
}

void AppendTimestamp(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& out) {
  auto t = std::chrono::system_clock::to_time_t(msg.time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(msg.time.time_since_epoch()) %
                1'000'000;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros.count()));
  out.append(std::string_view(buf));
}

// One formatter for both formats: spdlog's pattern language cannot escape JSON or add a field only
// when a request id is set.
class WispFormatter final : public spdlog::formatter {
 public:
  WispFormatter(bool json, std::string service) : json_(json), service_(std::move(service)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto level = spdlog::level::to_string_view(msg.level);
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    const std::string_view logger(msg.logger_name.data(), msg.logger_name.size());
    if (json_) {
      dest.append(std::string_view("{\"ts\":\""));
      AppendTimestamp(msg, dest);
      dest.append(std::string_view("\",\"level\":\""));
      dest.append(level.data(), level.data() + level.size());
      dest.append(std::string_view("\",\"service\":\""));
      AppendJsonEscaped(service_, dest);
      dest.append(std::string_view("\",\"logger\":\""));
      AppendJsonEscaped(logger, dest);
      if (!t_request_id.empty()) {
        dest.append(std::string_view("\",\"rid\":\""));
        AppendJsonEscaped(t_request_id, dest);
      }
      if (!msg.source.empty()) {
        dest.append(std::string_view("\",\"src\":\""));
        AppendJsonEscaped(msg.source.filename, dest);
        dest.push_back(':');
        auto line = std::to_string(msg.source.line);
        dest.append(std::string_view(line));
      }
      dest.append(std::string_view("\",\"msg\":\""));
      AppendJsonEscaped(payload, dest);
      dest.append(std::string_view("\"}\n"));
      return;
    }
    AppendTimestamp(msg, dest);
    dest.push_back(' ');
    dest.append(level.data(), level.data() + level.size());
    dest.push_back(' ');
    dest.append(std::string_view(service_));
    dest.push_back('/');
    dest.append(logger);
    if (!t_request_id.empty()) {
      dest.append(std::string_view(" [rid="));
      dest.append(std::string_view(t_request_id));
      dest.push_back(']');
    }
    dest.push_back(' ');
    dest.append(payload);
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<WispFormatter>(json_, service_);
  }

 private:
  bool json_;
  std::string service_;
};

void EnsureSinksLocked(State& state) {
  if (state.sinks.empty()) {
    state.sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
    state.sinks.back()->set_formatter(std::make_unique<WispFormatter>(state.json, state.service));
  }
}

}  // namespace

absl::Status Init(const Options& options) {
  auto level = spdlog::level::from_str(options.level);
  // from_str maps anything unknown to "off"; only accept "off" when it was asked for.
  if (level == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(
        "log-level: \"" + options.level +
        "\" is not one of trace, debug, info, warn, error, critical, off");
  }
  if (options.format != "text" && options.format != "json") {
    return absl::InvalidArgumentError("log-format: \"" + options.format +
                                      "\" is not one of text, json");
  }
  State& state = GetState();
  std::lock_guard lock(state.mu);
  state.level = level;
  state.service = options.service;
  state.json = options.format == "json";
  state.sinks.clear();
  if (options.sink) {
    options.sink->set_formatter(std::make_unique<WispFormatter>(state.json, state.service));
    state.sinks.push_back(options.sink);
  }
  EnsureSinksLocked(state);
  state.initialized = true;
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) {
    l->sinks() = state.sinks;
    l->set_level(state.level);
  });
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> Get(std::string_view name) {
  State& state = GetState();
  std::lock_guard lock(state.mu);
  const std::string key(name);
  if (auto existing = spdlog::get(key)) return existing;
  EnsureSinksLocked(state);
  auto logger = std::make_shared<spdlog::logger>(key, state.sinks.begin(), state.sinks.end());
  logger->set_level(state.level);
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

ScopedRequestId::ScopedRequestId(std::string_view id) : previous_(std::move(t_request_id)) {
  t_request_id.assign(id.data(), id.size());
}
ScopedRequestId::~ScopedRequestId() { t_request_id = std::move(previous_); }

const std::string& CurrentRequestId() { return t_request_id; }

std::string Redact(std::string_view secret) {
  return "<redacted " + std::to_string(secret.size()) + " bytes>";
}

}  // namespace wisp::log
