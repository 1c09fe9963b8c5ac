#include "remote_jwks.hpp"

#include <fstream>
#include <optional>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "wisp/http/url.hpp"
#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("jwks");
  return logger;
}

// An https URL without user information (a JWKS is public: credentials in its URL are a mistake).
absl::StatusOr<http::Url> ParseHttpsUrl(std::string_view url, std::string_view field) {
  WISP_ASSIGN_OR_RETURN(http::Url u, http::ParseUrl(url, field));
  if (u.scheme != "https") {
    return absl::InvalidArgumentError(std::string(field) + ": \"" + std::string(url) +
                                      "\" must be an https:// URL");
  }
  if (!u.user_info.empty()) {
    return absl::InvalidArgumentError(std::string(field) + ": must not carry user information");
  }
  return u;
}

}  // namespace

absl::Status ValidateHttpsUrl(std::string_view url, std::string_view field) {
  return ParseHttpsUrl(url, field).status();
}

absl::StatusOr<std::unique_ptr<HttpsJwksFetcher>> HttpsJwksFetcher::Create(
    HttpsFetchOptions options) {
  if (!options.ca_file.empty()) {
    // Load it once now so a wrong path or a file without certificates is a start-up error.
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    error_code ec;
    ctx.load_verify_file(options.ca_file, ec);
    if (ec) {
      return absl::InvalidArgumentError("cannot load CA file \"" + options.ca_file +
                                        "\": " + ec.message());
    }
  }
  if (options.max_bytes == 0) return absl::InvalidArgumentError("max_bytes: must be positive");
  return std::unique_ptr<HttpsJwksFetcher>(new HttpsJwksFetcher(std::move(options)));
}

absl::StatusOr<std::string> HttpsJwksFetcher::Fetch(const std::string& url) {
  WISP_ASSIGN_OR_RETURN(http::Url u, ParseHttpsUrl(url, "JWKS URL"));
  const std::string where = "JWKS " + url;
  asio::io_context ioc;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  error_code ec;
  if (options_.ca_file.empty()) {
    ctx.set_default_verify_paths(ec);
  } else {
    ctx.load_verify_file(options_.ca_file, ec);
  }
  if (ec) return absl::FailedPreconditionError(where + ": CA: " + ec.message());
  ctx.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
  SSL* ssl = stream.native_handle();
  error_code addr_ec;
  (void)asio::ip::make_address(u.host, addr_ec);
  if (addr_ec) {
    SSL_set_tlsext_host_name(ssl, u.host.c_str());
    SSL_set1_host(ssl, u.host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), u.host.c_str());
  }

  // Every step runs on this private io_context with the stream's deadline, so a server that
  // stalls cannot hold the caller beyond `timeout`.
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(options_.timeout);
  tcp::resolver resolver(ioc);
  tcp::resolver::results_type endpoints;
  resolver.async_resolve(u.host, u.port, [&](error_code e, tcp::resolver::results_type r) {
    ec = e;
    endpoints = std::move(r);
  });
  ioc.run();
  if (ec) return absl::UnavailableError(where + ": resolving " + u.host + ": " + ec.message());
  ioc.restart();
  lowest.async_connect(endpoints, [&](error_code e, const tcp::endpoint&) { ec = e; });
  ioc.run();
  if (ec) return absl::UnavailableError(where + ": connecting: " + ec.message());
  ioc.restart();
  stream.async_handshake(asio::ssl::stream_base::client, [&](error_code e) { ec = e; });
  ioc.run();
  if (ec) {
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      return absl::UnavailableError(where + ": certificate verify failed (" +
                                    X509_verify_cert_error_string(verify) + ")");
    }
    return absl::UnavailableError(where + ": TLS handshake: " + ec.message());
  }
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, u.target, 11};
  req.set(bhttp::field::host, u.port == "443" ? u.host : u.host + ":" + u.port);
  req.set(bhttp::field::user_agent, "wisp-token/" WISP_VERSION);
  req.set(bhttp::field::accept, "application/jwk-set+json, application/json");
  req.set(bhttp::field::accept_encoding, "identity");
  ioc.restart();
  bhttp::async_write(stream, req, [&](error_code e, size_t) { ec = e; });
  ioc.run();
  if (ec) return absl::UnavailableError(where + ": sending the request: " + ec.message());
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(options_.max_bytes);
  parser.header_limit(16 * 1024);
  ioc.restart();
  bhttp::async_read(stream, buffer, parser, [&](error_code e, size_t) { ec = e; });
  ioc.run();
  if (ec == bhttp::error::body_limit) {
    return absl::ResourceExhaustedError(where + ": response is larger than " +
                                        std::to_string(options_.max_bytes) + " bytes");
  }
  if (ec == beast::error::timeout) return absl::UnavailableError(where + ": timed out");
  if (ec) return absl::UnavailableError(where + ": reading the response: " + ec.message());
  const auto& res = parser.get();
  if (res.result_int() != 200) {
    return absl::UnavailableError(where + ": answered HTTP " + std::to_string(res.result_int()));
  }
  // Closing politely is not worth a wait; the socket closes with the stream.
  return res.body();
}

RemoteJwks::RemoteJwks(std::shared_ptr<JwksFetcher> fetcher, Options options, Clock& clock,
                       TokenMetrics* metrics)
    : fetcher_(std::move(fetcher)),
      options_(std::move(options)),
      clock_(clock),
      metrics_(metrics),
      keys_(std::make_shared<jwt::KeySet>()) {}

std::shared_ptr<const jwt::KeySet> RemoteJwks::Current() const {
  std::lock_guard lock(mu_);
  return keys_;
}

bool RemoteJwks::loaded() const {
  std::lock_guard lock(mu_);
  return loaded_;
}

absl::Status RemoteJwks::Refresh() {
  std::lock_guard fetch(fetch_mu_);
  return RefreshLocked();
}

absl::Status RemoteJwks::RefreshLocked() {
  {
    std::lock_guard lock(mu_);
    last_attempt_ = clock_.Steady();
    attempted_ = true;
  }
  absl::Status result = absl::OkStatus();
  auto body = fetcher_->Fetch(options_.url);
  if (!body.ok()) {
    result = body.status();
  } else {
    auto set = jwt::KeySet::FromJwks(*body);
    if (!set.ok()) {
      result = absl::InvalidArgumentError("JWKS " + options_.url + ": " +
                                          std::string(set.status().message()));
    } else if (set->keys().empty()) {
      result = absl::InvalidArgumentError("JWKS " + options_.url + ": no RS256/ES256 keys");
    } else {
      const size_t n = set->keys().size();
      {
        std::lock_guard lock(mu_);
        keys_ = std::make_shared<const jwt::KeySet>(std::move(*set));
        loaded_ = true;
      }
      if (metrics_) {
        metrics_->JwksFetch(options_.issuer, "ok").Increment();
        metrics_->JwksKeys(options_.issuer).Set(static_cast<double>(n));
      }
      SPDLOG_LOGGER_DEBUG(Logger(), "JWKS of {} refreshed: {} keys", options_.issuer, n);
      return absl::OkStatus();
    }
  }
  if (metrics_) metrics_->JwksFetch(options_.issuer, "error").Increment();
  SPDLOG_LOGGER_WARN(Logger(), "JWKS of {} not refreshed (keeping the last good set): {}",
                     options_.issuer, result.ToString());
  return result;
}

void RemoteJwks::RefreshIfDue() {
  {
    std::lock_guard lock(mu_);
    const auto interval = loaded_ ? options_.refresh_interval : options_.min_refetch_interval;
    if (attempted_ && clock_.Steady() - last_attempt_ < interval) return;
  }
  (void)Refresh();
}

bool RemoteJwks::RefreshForUnknownKid() {
  std::unique_lock fetch(fetch_mu_, std::try_to_lock);
  if (!fetch.owns_lock()) {
    // Another caller is fetching right now: wait for it and use its outcome.
    fetch.lock();
    return loaded();
  }
  {
    std::lock_guard lock(mu_);
    if (attempted_ && clock_.Steady() - last_attempt_ < options_.min_refetch_interval) {
      return false;
    }
  }
  return RefreshLocked().ok();
}

}  // namespace wisp::token
