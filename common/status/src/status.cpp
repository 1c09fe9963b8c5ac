#include "wisp/status/status.hpp"

#include <array>
#include <charconv>

#include <string>

namespace wisp {
namespace {

constexpr std::array<std::string_view, 17> kNames = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

}  // namespace

std::string_view StatusCodeName(absl::StatusCode code) {
  const auto i = static_cast<size_t>(code);
  return i < kNames.size() ? kNames[i] : "UNKNOWN";
}

absl::StatusCode ParseStatusCode(std::string_view text) {
  int n = 0;
  const auto* end = text.data() + text.size();
  if (auto [p, ec] = std::from_chars(text.data(), end, n); ec == std::errc() && p == end) {
    return (n >= 0 && n < static_cast<int>(kNames.size())) ? static_cast<absl::StatusCode>(n)
                                                           : absl::StatusCode::kUnknown;
  }
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == text) return static_cast<absl::StatusCode>(i);
  }
  return absl::StatusCode::kUnknown;
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), std::string(context) + ": " + std::string(status.message()));
}

}  // namespace wisp
