#pragma once
// TokenServer: the sidecar's token-url endpoint ("/" on a unix socket) over a single-flight cache.
//
// Contract:
//   - Get() returns the cached access token until its refresh point; then the next caller
//     exchanges the current projected token (TokenFile re-reads it when kubelet rotated it) at the
//     STS. The refresh point is drawn once per token, uniformly between (refresh_fraction -
//     refresh_jitter_percent/100) and refresh_fraction of its lifetime (70-80% by default; kubelet
//     refreshes projected tokens at exactly 80%), so sidecars that got their tokens in the same
//     second do not all come back in the same second.
//   - Single flight: concurrent callers during an exchange wait for that one exchange, one STS
//     call per refresh, not per request. Between the refresh point and the expiry the
//     still-valid cached token answers at once while one caller refreshes it.
//   - A failed exchange (the STS refused, failed, answered 429/503, or the token file is missing)
//     backs off: no attempt before NextAttempt(), RetryDelay() after the n-th failure in a row
//     (1 s, 2 s, 4 s ... 30 s, each drawn from its upper half, and never before the STS's
//     Retry-After, at most kMaxRetryAfter). Meanwhile a still-valid cached token is served (as
//     kubelet's token manager does) and a caller without one gets the last error at once: a down
//     or overloaded STS is not asked once per request. A new subject token (kubelet replaced
//     the file) ends the wait, unless the STS said Retry-After. A success resets the backoff.
//   - With refresh_jitter_percent 0 and single_flight false (wisp-sidecar --refresh-jitter-percent
//     0 --no-single-flight: bench/token's baseline) the refresh point is exactly
//     refresh_fraction, delays are not spread, and every caller that finds no fresh token
//     exchanges on its own.
//   - The randomness is injected (Options::random, uniform in [0, 1)) and so is the clock: unit
//     tests are deterministic.
//   - With `metrics`: every answer, cache hit/miss, exchange outcome and token file (re)load
//     counts. Cache hits and misses count the app's requests only: Get(kWarm), the sidecar's own
//     keep-warm call, is not a cache lookup anyone made (its exchanges still count).
//   - Handle() answers 200 {"access_token","token_type","expiry"} with expiry in RFC 3339 as Go's
//     time.Time marshals it (UTC, fractional seconds without trailing zeros), so gcsfuse's
//     gcs-auth:token-url (oauth2.Token) reads it; failure -> 500 {"error": "..."} (never a token).
//
//   TokenServer server(file, *sts, clock, {.metrics = &metrics});
//   http->HandlePrefix("GET", "/", [&](const http::Request& r) { return server.Handle(r); });
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "sidecar_metrics.hpp"
#include "sts_client.hpp"
#include "token_file.hpp"
#include "wisp/http/server.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::sidecar {

// The longest Retry-After honoured: an STS that asks for more is retried after this.
inline constexpr std::chrono::seconds kMaxRetryAfter{300};

struct RefreshOptions {
  double refresh_fraction = 0.8;
  int64_t refresh_jitter_percent = 10;  // 0 = refresh at exactly refresh_fraction, fixed delays
  bool single_flight = true;
  std::chrono::milliseconds backoff_initial{1000};
  std::chrono::milliseconds backoff_max{30000};
  std::function<double()> random;  // uniform in [0, 1); empty = a seeded std::mt19937_64
  SidecarMetrics* metrics = nullptr;
};

// The wait after the `failures`-th failed exchange in a row: backoff_initial * 2^(failures - 1)
// up to backoff_max, d; with jitter, d * (1 - draw1 / 2) (its upper half); never less than
// `retry_after` (capped at kMaxRetryAfter), itself spread by up to d / 2 with jitter (draw2).
std::chrono::milliseconds RetryDelay(int failures, std::optional<std::chrono::seconds> retry_after,
                                     const RefreshOptions& options, double draw1, double draw2);

struct CachedToken {
  std::string access_token;
  std::string token_type;
  std::chrono::system_clock::time_point expiry;
};

class TokenServer {
 public:
  TokenServer(TokenFile& file, StsClient& sts, Clock& clock, RefreshOptions options = {});

  enum class Caller { kRequest, kWarm };
  absl::StatusOr<CachedToken> Get(Caller caller = Caller::kRequest);
  http::Response Handle(const http::Request& request);
  int exchanges() const;
  // When the refresher should call Get(kWarm) again: the refresh point of the token held, or,
  // after a failure, the end of the backoff (both by the injected clock).
  std::chrono::system_clock::time_point NextAttempt() const;

 private:
  double Draw() const;

  TokenFile& file_;
  StsClient& sts_;
  Clock& clock_;
  const RefreshOptions options_;
  SidecarMetrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;  // exchanges under way (at most 1 with single flight)
  int failures_ = 0;   // failed exchanges in a row
  std::optional<CachedToken> cached_;
  std::chrono::system_clock::time_point refresh_at_;
  std::chrono::system_clock::time_point retry_at_{};  // no refresh attempt before this
  absl::Status last_error_ = absl::OkStatus();
  int failed_loads_ = -1;  // file_.loads() when the last attempt failed: a new token ends the wait
  uint64_t generation_ = 0;  // bumps after every finished exchange attempt
  int exchanges_ = 0;
};

// RFC 3339 with nanoseconds, trailing zeros trimmed, "Z" (Go's time.RFC3339Nano in UTC).
std::string FormatRfc3339Nano(std::chrono::system_clock::time_point t);

}  // namespace wisp::sidecar
