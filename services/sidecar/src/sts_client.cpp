#include "sts_client.hpp"

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>

#include "absl/strings/cord.h"

#include "wisp/http/url.hpp"

namespace wisp::sidecar {
namespace {

constexpr const char* kGrant = "urn:ietf:params:oauth:grant-type:token-exchange";
constexpr const char* kJwt = "urn:ietf:params:oauth:token-type:jwt";
constexpr const char* kAccess = "urn:ietf:params:oauth:token-type:access_token";
constexpr const char* kRetryAfterPayload = "type.wisp.dev/sidecar.RetryAfter";

absl::Status ValidateOptions(const StsOptions& options) {
  WISP_ASSIGN_OR_RETURN(http::Url url, http::ParseUrl(options.url, "sts-url"));
  if (url.scheme != "https") return absl::InvalidArgumentError("sts-url: must be an https:// URL");
  if (!url.user_info.empty()) {
    return absl::InvalidArgumentError("sts-url: must not carry user information");
  }
  if (!options.ca_file.empty() && !options.ca_pem.empty()) {
    return absl::InvalidArgumentError("ca-file and ca-pem: give one of them, not both");
  }
  if (!options.ca_pem.empty() &&
      options.ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError("ca-pem: not a PEM certificate bundle");
  }
  if (options.audience.empty())
    return absl::InvalidArgumentError("audience (or sts-audience): required");
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("timeout: must be positive");
  return absl::OkStatus();
}

}  // namespace

std::string FormEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (unsigned char c : value) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value,
                                                    std::chrono::system_clock::time_point now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (value.size() > 9) return std::chrono::seconds(999'999'999);  // "a very long time"
    return std::chrono::seconds(std::stoll(std::string(value)));
  }
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
  std::tm tm{};
  const std::string text(value);
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const auto at = std::chrono::system_clock::from_time_t(timegm(&tm));
  if (at <= now) return std::chrono::seconds(0);
  return std::chrono::ceil<std::chrono::seconds>(at - now);
}

absl::Status WithRetryAfter(absl::Status status, std::chrono::seconds retry_after) {
  status.SetPayload(kRetryAfterPayload, absl::Cord(std::to_string(retry_after.count())));
  return status;
}

std::optional<std::chrono::seconds> RetryAfterOf(const absl::Status& status) {
  const auto p = status.GetPayload(kRetryAfterPayload);
  if (!p) return std::nullopt;
  return std::chrono::seconds(std::stoll(std::string(*p)));
}

bool IsRejection(const absl::Status& status) {
  // The codes http::StatusOf gives only for 4xx answers (400, 401, 403, 404/410, 409, 416).
  // FailedPrecondition (412 and rarer 4xx) is left out: it is also what an untrusted
  // certificate gives.
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kOutOfRange:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<std::unique_ptr<HttpStsClient>> HttpStsClient::Create(StsOptions options) {
  WISP_RETURN_IF_ERROR(ValidateOptions(options));
  // No CA: the system trust store verifies the gateway (a publicly or operator-trusted
  // certificate); a CA file that is named but unreadable is a mistake, not a fallback.
  auto client = http::NewClient({.tls = {.ca_pem = options.ca_pem, .ca_file = options.ca_file},
                                 .connect_timeout = options.timeout,
                                 .read_timeout = options.timeout,
                                 .total_timeout = options.timeout,
                                 .max_response_bytes = 1 << 20,
                                 .user_agent = "wisp-sidecar/" WISP_VERSION,
                                 .name = "sts-client"});
  if (!client.ok()) {
    // The client names its own fields (tls.ca_file: ...); name the flags instead.
    std::string why(client.status().message());
    const std::pair<std::string_view, std::string_view> renames[] = {{"tls.ca_file: ", "ca-file: "},
                                                                     {"tls.ca_pem: ", "ca-pem: "}};
    for (const auto& [from, to] : renames) {
      if (why.rfind(from, 0) == 0) why = std::string(to) + why.substr(from.size());
    }
    return absl::InvalidArgumentError(why);
  }
  return Create(std::move(options), std::shared_ptr<http::Client>(std::move(*client)));
}

absl::StatusOr<std::unique_ptr<HttpStsClient>> HttpStsClient::Create(
    StsOptions options, std::shared_ptr<http::Client> client) {
  WISP_RETURN_IF_ERROR(ValidateOptions(options));
  return std::unique_ptr<HttpStsClient>(new HttpStsClient(std::move(options), std::move(client)));
}

absl::StatusOr<AccessToken> HttpStsClient::Exchange(const std::string& subject_token) {
  const auto& o = options_;
  std::string body =
      std::string("grant_type=") + FormEscape(kGrant) +
      "&subject_token=" + FormEscape(subject_token) + "&subject_token_type=" + FormEscape(kJwt) +
      "&requested_token_type=" + FormEscape(kAccess) + "&audience=" + FormEscape(o.audience);
  if (!o.scope.empty()) body += "&scope=" + FormEscape(o.scope);
  WISP_ASSIGN_OR_RETURN(
      http::ClientResponse resp,
      client_->Send({.method = "POST",
                     .url = o.url,
                     .headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                                 {"Accept", "application/json"}},
                     .body = std::move(body),
                     .total_timeout = o.timeout}));
  nlohmann::json j = nlohmann::json::parse(resp.body, nullptr, false);
  if (resp.status != 200) {
    absl::Status st = http::StatusOf(resp);
    if (st.ok())
      st = absl::UnavailableError("HTTP " + std::to_string(resp.status) + " from " + resp.url);
    std::string what = "STS answered " + std::string(st.message());
    if (j.is_object() && j.contains("error") && j["error"].is_string()) {
      what += ": " + j["error"].get<std::string>();
      if (j.contains("error_description") && j["error_description"].is_string()) {
        what += ": " + j["error_description"].get<std::string>();
      }
    }
    absl::Status out(st.code(), what);
    for (const auto& [name, value] : resp.headers) {
      if (name != "retry-after") continue;
      if (auto after = ParseRetryAfter(value, std::chrono::system_clock::now())) {
        out = WithRetryAfter(std::move(out), *after);
      }
      break;
    }
    return out;
  }
  if (!j.is_object() || !j.contains("access_token") || !j["access_token"].is_string() ||
      !j.contains("expires_in") || !j["expires_in"].is_number_integer()) {
    return absl::UnavailableError("STS answer lacks access_token or expires_in");
  }
  AccessToken t;
  t.access_token = j["access_token"].get<std::string>();
  t.token_type = j.value("token_type", "Bearer");
  t.expires_in = std::chrono::seconds(j["expires_in"].get<int64_t>());
  if (t.access_token.empty() || t.expires_in.count() <= 0) {
    return absl::UnavailableError("STS answer has an empty access_token or expires_in <= 0");
  }
  return t;
}

}  // namespace wisp::sidecar
