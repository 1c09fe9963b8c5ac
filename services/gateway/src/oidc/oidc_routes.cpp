#include "oidc/oidc_routes.hpp"

#include <nlohmann/json.hpp>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::gateway::oidc {
namespace {

constexpr std::string_view kDiscoveryPath = "/.well-known/openid-configuration";
constexpr std::string_view kJwksPath = "/openid/v1/jwks";
constexpr std::string_view kTokenPath = "/v1/token";

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%') {
      const int hi = i + 1 < s.size() ? Hex(s[i + 1]) : -1;
      const int lo = i + 2 < s.size() ? Hex(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) return absl::InvalidArgumentError("form: bad percent escape");
      out.push_back(static_cast<char>((hi << 4) | lo));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

http::Response OAuthError(int status, std::string_view code, std::string_view description) {
  nlohmann::json body = {{"error", code}, {"error_description", description}};
  http::Response r = http::Response::Json(status, body.dump());
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("Pragma", "no-cache");
  return r;
}

// The unverified "iss sub" of a JWT (for the pre-check of the rate limit only). Whitespace at the
// ends (a token file written by `echo`) is dropped, as wisp-token's exchange drops it.
std::string UnverifiedSubject(std::string_view token) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t first = token.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return "";
  token = token.substr(first, token.find_last_not_of(kSpace) - first + 1);
  auto d = jwt::Decode(token);
  if (!d.ok()) return "";
  return d->claims.value("iss", "") + " " + d->claims.value("sub", "");
}

std::string Field(const nlohmann::json& j, const char* snake, const char* camel) {
  for (const char* k : {snake, camel}) {
    if (auto it = j.find(k); it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseForm(std::string_view body) {
  std::map<std::string, std::string> out;
  while (!body.empty()) {
    const size_t amp = body.find('&');
    std::string_view pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    WISP_ASSIGN_OR_RETURN(std::string name, PercentDecode(pair.substr(0, eq)));
    WISP_ASSIGN_OR_RETURN(
        std::string value,
        PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1)));
    out.emplace(std::move(name), std::move(value));  // first occurrence wins
  }
  return out;
}

OidcMetrics::OidcMetrics(prometheus::Registry& r)
    : oidc_requests_total(prometheus::BuildCounter()
                              .Name("wisp_gateway_oidc_requests_total")
                              .Help("OIDC discovery and JWKS requests, by path")
                              .Register(r)),
      sts_requests_total(prometheus::BuildCounter()
                             .Name("wisp_gateway_sts_requests_total")
                             .Help("STS token exchange requests, by outcome")
                             .Register(r)) {}

OidcRoutes::OidcRoutes(bus::Bus& bus, prometheus::Registry& registry, Clock& clock,
                       OidcOptions options)
    : bus_(bus),
      metrics_(registry),
      options_(options),
      cache_(bus, options.key_cache),
      limiter_(clock,
               {.rate_per_second = options.sts_rate_per_second, .burst = options.sts_burst}) {}

OidcRoutes::~OidcRoutes() { cache_.Stop(); }

absl::Status OidcRoutes::Start() { return cache_.Start(); }

void OidcRoutes::Register(http::Server& server) {
  server.Handle("GET", std::string(kDiscoveryPath),
                [this](const http::Request& r) { return Discovery(r); });
  server.Handle("GET", std::string(kJwksPath), [this](const http::Request& r) { return Jwks(r); });
  server.Handle("POST", std::string(kTokenPath),
                [this](const http::Request& r) { return Token(r); });
}

http::Response OidcRoutes::Discovery(const http::Request&) {
  metrics_.oidc_requests_total.Add({{"path", std::string(kDiscoveryPath)}}).Increment();
  auto keys = cache_.Current();
  if (!keys) return http::Response::Error(503, "the issuer's key set is not available yet");
  http::Response r = http::Response::Json(200, keys->openid_configuration_json());
  r.headers.emplace_back("Cache-Control",
                         "public, max-age=" + std::to_string(options_.cache_max_age.count()));
  return r;
}

http::Response OidcRoutes::Jwks(const http::Request&) {
  metrics_.oidc_requests_total.Add({{"path", std::string(kJwksPath)}}).Increment();
  auto keys = cache_.Current();
  if (!keys) return http::Response::Error(503, "the issuer's key set is not available yet");
  http::Response r = http::Response::Json(200, keys->jwks_json());
  r.content_type = "application/jwk-set+json";
  r.headers.emplace_back("Cache-Control",
                         "public, max-age=" + std::to_string(options_.cache_max_age.count()));
  return r;
}

http::Response OidcRoutes::Token(const http::Request& request) {
  const auto count = [&](std::string_view outcome) {
    metrics_.sts_requests_total.Add({{"outcome", std::string(outcome)}}).Increment();
  };
  v1::ExchangeRequest req;
  const std::string_view ct = request.Header("content-type");
  if (ct.rfind("application/json", 0) == 0) {
    nlohmann::json j = nlohmann::json::parse(request.body, nullptr, false);
    if (!j.is_object()) {
      count("invalid_request");
      return OAuthError(400, "invalid_request", "body is not a JSON object");
    }
    req.set_grant_type(Field(j, "grant_type", "grantType"));
    req.set_subject_token(Field(j, "subject_token", "subjectToken"));
    req.set_subject_token_type(Field(j, "subject_token_type", "subjectTokenType"));
    req.set_requested_token_type(Field(j, "requested_token_type", "requestedTokenType"));
    req.set_audience(Field(j, "audience", "audience"));
    req.set_scope(Field(j, "scope", "scope"));
    req.set_resource(Field(j, "resource", "resource"));
  } else if (ct.rfind("application/x-www-form-urlencoded", 0) == 0) {
    auto form = ParseForm(request.body);
    if (!form.ok()) {
      count("invalid_request");
      return OAuthError(400, "invalid_request", std::string(form.status().message()));
    }
    const auto get = [&](const char* k) {
      auto it = form->find(k);
      return it == form->end() ? std::string() : it->second;
    };
    req.set_grant_type(get("grant_type"));
    req.set_subject_token(get("subject_token"));
    req.set_subject_token_type(get("subject_token_type"));
    req.set_requested_token_type(get("requested_token_type"));
    req.set_audience(get("audience"));
    req.set_scope(get("scope"));
    req.set_resource(get("resource"));
  } else {
    count("invalid_request");
    return OAuthError(400, "invalid_request",
                      "Content-Type must be application/x-www-form-urlencoded or application/json");
  }

  const std::string claimed = UnverifiedSubject(req.subject_token());
  if (!claimed.empty() && !limiter_.Check(claimed)) {
    count("rate_limited");
    http::Response r = OAuthError(429, "temporarily_unavailable",
                                  "too many token requests for this subject; retry later");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  auto resp = bus::Call<v1::ExchangeResponse>(bus_, bus::subjects::kTokenExchange, req,
                                              options_.exchange_timeout);
  if (!resp.ok()) {
    static auto logger = log::Get("sts");
    SPDLOG_LOGGER_WARN(logger, "token exchange over the bus failed: {}", resp.status().ToString());
    count("unavailable");
    return OAuthError(503, "temporarily_unavailable", "the token service is not available");
  }
  if (!resp->subject().empty()) (void)limiter_.Allow(resp->subject());
  if (!resp->error().empty()) {
    count(resp->error());
    return OAuthError(resp->http_status() > 0 ? resp->http_status() : 400, resp->error(),
                      resp->error_description());
  }
  count("ok");
  nlohmann::json body = {{"access_token", resp->access_token()},
                         {"issued_token_type", resp->issued_token_type()},
                         {"token_type", resp->token_type()},
                         {"expires_in", resp->expires_in()}};
  if (!resp->scope().empty()) body["scope"] = resp->scope();
  http::Response r = http::Response::Json(200, body.dump());
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("Pragma", "no-cache");
  return r;
}

absl::StatusOr<std::unique_ptr<OidcRoutes>> RegisterOidcRoutes(http::Server& server, bus::Bus& bus,
                                                               prometheus::Registry& registry,
                                                               OidcOptions options, Clock& clock) {
  auto routes = std::make_unique<OidcRoutes>(bus, registry, clock, options);
  WISP_RETURN_IF_ERROR(routes->Start());
  routes->Register(server);
  return routes;
}

}  // namespace wisp::gateway::oidc
