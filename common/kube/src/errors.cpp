#include "wisp/kube/errors.hpp"

#include <optional>

#include "absl/strings/cord.h"
#include "wisp/k8s/json.hpp"

namespace wisp::kube {
namespace {

std::optional<absl::StatusCode> CodeOfReason(std::string_view reason) {
  using C = absl::StatusCode;
  if (reason == "NotFound") return C::kNotFound;
  if (reason == "AlreadyExists") return C::kAlreadyExists;
  if (reason == "Conflict") return C::kAborted;
  if (reason == "Forbidden") return C::kPermissionDenied;
  if (reason == "Unauthorized") return C::kUnauthenticated;
  if (reason == "Invalid" || reason == "BadRequest") return C::kInvalidArgument;
  if (reason == "Gone" || reason == "Expired") return C::kOutOfRange;
  if (reason == "TooManyRequests") return C::kResourceExhausted;
  if (reason == "Timeout" || reason == "ServerTimeout" || reason == "InternalError" ||
      reason == "ServiceUnavailable") {
    return C::kUnavailable;
  }
  if (reason == "MethodNotAllowed") return C::kUnimplemented;
  if (reason == "NotAcceptable" || reason == "UnsupportedMediaType" ||
      reason == "RequestEntityTooLarge") {
    return C::kFailedPrecondition;
  }
  return std::nullopt;
}

absl::StatusCode CodeOfHttp(int code) {
  using C = absl::StatusCode;
  switch (code) {
    case 400:
    case 422:
      return C::kInvalidArgument;
    case 401:
      return C::kUnauthenticated;
    case 403:
      return C::kPermissionDenied;
    case 404:
      return C::kNotFound;
    case 409:
      return C::kAborted;
    case 410:
      return C::kOutOfRange;
    case 429:
      return C::kResourceExhausted;
    case 504:
      return C::kUnavailable;
    default:
      return code >= 500 ? C::kUnavailable : C::kFailedPrecondition;
  }
}

// The reason a body-less answer stands for, as the apiserver's own names go.
std::string ReasonOfHttp(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "";
  }
}

absl::Status Make(int http_code, std::string reason, std::string_view message,
                  std::string_view context) {
  absl::StatusCode code = CodeOfHttp(http_code);
  if (auto c = CodeOfReason(reason)) code = *c;
  if (reason.empty()) reason = ReasonOfHttp(http_code);
  std::string text(context);
  text += ": ";
  text += message.empty() ? "the apiserver gave no message" : message;
  text += " (";
  if (!reason.empty()) text += reason + ", ";
  text += "HTTP " + std::to_string(http_code) + ")";
  absl::Status s(code, text);
  if (!reason.empty()) s.SetPayload(kReasonPayload, absl::Cord(reason));
  return s;
}

}  // namespace

absl::Status StatusFromStatusObject(const nlohmann::json& status, std::string_view context) {
  if (!status.is_object()) return Make(500, "", "an ERROR event without a Status", context);
  const int code = status.value("code", 500);
  return Make(code, status.value("reason", ""), status.value("message", ""), context);
}

absl::Status StatusFromApi(int http_code, std::string_view body, std::string_view context) {
  if (http_code >= 200 && http_code < 300) return absl::OkStatus();
  auto parsed = k8s::ParseJson(body, "Status");
  if (parsed.ok() && parsed->is_object() && parsed->value("kind", "") == "Status") {
    return Make(http_code, parsed->value("reason", ""), parsed->value("message", ""), context);
  }
  // Not a Status (a proxy's page, an empty body): the HTTP code, and a bounded bit of the body.
  std::string text(body.substr(0, 200));
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return Make(http_code, "", text, context);
}

std::string ReasonOf(const absl::Status& status) {
  auto p = status.GetPayload(kReasonPayload);
  return p ? std::string(*p) : "";
}

bool IsNotFound(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound && ReasonOf(status) == "NotFound";
}
bool IsAlreadyExists(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAlreadyExists;
}
bool IsConflict(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted && ReasonOf(status) == "Conflict";
}
bool IsGone(const absl::Status& status) { return status.code() == absl::StatusCode::kOutOfRange; }

}  // namespace wisp::kube
