#include "sts_client.hpp"

#include <fstream>

#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>
#include <nlohmann/json.hpp>

namespace wisp::sidecar {
namespace {

constexpr const char* kGrant = "urn:ietf:params:oauth:grant-type:token-exchange";
constexpr const char* kJwt = "urn:ietf:params:oauth:token-type:jwt";
constexpr const char* kAccess = "urn:ietf:params:oauth:token-type:access_token";

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

struct HttpStsClient::Impl {
  StsOptions options;
  std::unique_ptr<web::http::client::http_client> client;
};

HttpStsClient::HttpStsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpStsClient::~HttpStsClient() = default;

absl::StatusOr<std::unique_ptr<HttpStsClient>> HttpStsClient::Create(StsOptions options) {
  if (options.url.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError("sts-url: must be an https:// URL");
  }
  // No CA file: the system trust store verifies the gateway (a publicly or operator-trusted
  // certificate); a CA file that is named but unreadable is a mistake, not a fallback.
  if (!options.ca_file.empty() && !std::ifstream(options.ca_file)) {
    return absl::InvalidArgumentError("ca-file: cannot read \"" + options.ca_file + "\"");
  }
  if (!options.ca_file.empty() && !options.ca_pem.empty()) {
    return absl::InvalidArgumentError("ca-file and ca-pem: give one of them, not both");
  }
  if (!options.ca_pem.empty() &&
      options.ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError("ca-pem: not a PEM certificate bundle");
  }
  if (options.audience.empty()) return absl::InvalidArgumentError("audience: required");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  try {
    web::http::client::http_client_config config;
    config.set_timeout(options.timeout);
    config.set_validate_certificates(true);
    const std::string ca = options.ca_file;
    const std::string pem = options.ca_pem;
    config.set_ssl_context_callback([ca, pem](boost::asio::ssl::context& ctx) {
      if (!pem.empty()) {
        ctx.add_certificate_authority(boost::asio::buffer(pem));
      } else if (ca.empty()) {
        ctx.set_default_verify_paths();
      } else {
        ctx.load_verify_file(ca);
      }
    });
    impl->client = std::make_unique<web::http::client::http_client>(options.url, config);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("sts-url: ") + e.what());
  }
  return std::unique_ptr<HttpStsClient>(new HttpStsClient(std::move(impl)));
}

absl::StatusOr<AccessToken> HttpStsClient::Exchange(const std::string& subject_token) {
  const auto& o = impl_->options;
  std::string body =
      std::string("grant_type=") + FormEscape(kGrant) +
      "&subject_token=" + FormEscape(subject_token) + "&subject_token_type=" + FormEscape(kJwt) +
      "&requested_token_type=" + FormEscape(kAccess) + "&audience=" + FormEscape(o.audience);
  if (!o.scope.empty()) body += "&scope=" + FormEscape(o.scope);
  int status = 0;
  std::string text;
  try {
    web::http::http_request req(web::http::methods::POST);
    req.set_body(body, "application/x-www-form-urlencoded");
    req.headers().add("Accept", "application/json");
    web::http::http_response resp = impl_->client->request(req).get();
    status = resp.status_code();
    text = resp.extract_utf8string(true).get();
  } catch (const std::exception& e) {
    return absl::UnavailableError(std::string("STS request failed: ") + e.what());
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (status != 200) {
    std::string what = "STS answered HTTP " + std::to_string(status);
    if (j.is_object() && j.contains("error")) {
      what += ": " + j.value("error", "") + ": " + j.value("error_description", "");
    }
    if (status >= 400 && status < 500 && status != 429) return absl::PermissionDeniedError(what);
    return absl::UnavailableError(what);
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
