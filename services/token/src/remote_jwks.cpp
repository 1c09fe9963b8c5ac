#include "remote_jwks.hpp"

#include "wisp/fsutil/read_file.hpp"
#include "wisp/http/url.hpp"
#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

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
  if (options.max_bytes == 0) return absl::InvalidArgumentError("max_bytes: must be positive");
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("timeout: must be positive");
  // The CA file is read now, so a wrong path or a file without certificates is a start-up error.
  auto client = http::NewClient({.tls = {.ca_file = options.ca_file},
                                 .connect_timeout = options.timeout,
                                 .read_timeout = options.timeout,
                                 .total_timeout = options.timeout,
                                 .user_agent = "wisp-token/" WISP_VERSION,
                                 .max_idle_per_host = 0,  // a refresh every few minutes
                                 .name = "jwks"});
  if (!client.ok()) {
    // "tls.ca_file: cannot load ..." names the client's field; the caller names the policy key.
    std::string why(client.status().message());
    if (why.rfind("tls.ca_file: ", 0) == 0) why.erase(0, 13);
    return absl::InvalidArgumentError(why);
  }
  return std::make_unique<HttpsJwksFetcher>(std::shared_ptr<http::Client>(std::move(*client)),
                                            std::move(options));
}

absl::StatusOr<std::string> HttpsJwksFetcher::Fetch(const std::string& url) {
  WISP_RETURN_IF_ERROR(ParseHttpsUrl(url, "JWKS URL").status());
  http::ClientRequest request{.url = url,
                              .headers = {{"Accept", "application/jwk-set+json, application/json"}},
                              .total_timeout = options_.timeout,
                              .max_response_bytes = options_.max_bytes};
  if (!options_.bearer_token_file.empty()) {
    absl::StatusOr<std::string> token =
        fsutil::ReadTrimmedFile(options_.bearer_token_file, 64 << 10);
    if (!token.ok() || token->empty()) {
      return absl::UnavailableError("JWKS " + url + ": no bearer token in " +
                                    options_.bearer_token_file);
    }
    request.bearer_token = *std::move(token);
  }
  WISP_ASSIGN_OR_RETURN(http::ClientResponse res, client_->Send(request));
  WISP_RETURN_IF_ERROR(http::StatusOf(res));
  if (res.status != 200) {
    return absl::FailedPreconditionError("unexpected HTTP " + std::to_string(res.status) + " " +
                                         res.reason + " from " + res.url);
  }
  return std::move(res.body);
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
