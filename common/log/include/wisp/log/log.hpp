#pragma once
// Logging for every wisp binary: spdlog, text or JSON lines, level from --log-level /
// WISP_LOG_LEVEL.
//
// Contract:
//   - Init() once from main(); before it, Get() returns loggers that write text at info to stderr.
//   - Get("admission") returns a named logger sharing the process sinks; cheap to call, cache it.
//   - Use the SPDLOG_LOGGER_* macros (source location; no formatting below the level).
//   - A request id set with ScopedRequestId appears in every line that thread writes meanwhile
//     (text: "[rid=<id>]", JSON: "rid" field). Use the AdmissionReview uid, the CSI volume_id, the
//     bus Wisp-Request-Id.
//   - Never log a token, a key or a CSI secret: pass such values through Redact().
//
// Example:
//   wisp::log::Init({.service = "wisp-token", .level = "debug", .format = "json"});
//   auto logger = wisp::log::Get("issuer");
//   wisp::log::ScopedRequestId rid(req.request_id);
//   SPDLOG_LOGGER_INFO(logger, "issued token for {}/{}", ns, sa);
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "wisp/status/status.hpp"

namespace wisp::log {

struct Options {
  std::string service = "wisp";
  std::string level = "info";   // trace|debug|info|warn|error|critical|off
  std::string format = "text";  // text|json
  // Where lines go; nullptr = stderr. Tests pass an ostream sink to read what a service prints.
  spdlog::sink_ptr sink;
};

// Validates the options (InvalidArgument naming "log-level" or "log-format") and installs the
// sinks.
absl::Status Init(const Options& options);

std::shared_ptr<spdlog::logger> Get(std::string_view name);

// Sets the calling thread's request id for its lifetime; nests (restores the previous id).
class ScopedRequestId {
 public:
  explicit ScopedRequestId(std::string_view id);
  ~ScopedRequestId();
  ScopedRequestId(const ScopedRequestId&) = delete;
  ScopedRequestId& operator=(const ScopedRequestId&) = delete;

 private:
  std::string previous_;
};

// The calling thread's request id ("" when none).
const std::string& CurrentRequestId();

// What to log instead of a secret: "<redacted N bytes>".
std::string Redact(std::string_view secret);

}  // namespace wisp::log
