#include "token_server.hpp"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "wisp/status/fake_clock.hpp"

namespace wisp::sidecar {
namespace {

// A StsClient that counts calls, can block until released, and can fail.
class FakeSts : public StsClient {
 public:
  absl::StatusOr<AccessToken> Exchange(const std::string& subject) override {
    {
      std::unique_lock lock(mu);
      ++calls;
      last_subject = subject;
      cv.wait(lock, [&] { return !hold; });
    }
    if (!fail.ok()) return fail;
    return AccessToken{"access-" + std::to_string(calls), "Bearer", std::chrono::seconds(1000)};
  }
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  int calls = 0;
  std::string last_subject;
  absl::Status fail = absl::OkStatus();
};

class TokenServerTest : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(path_) << "subject-jwt\n"; }
  void TearDown() override { std::remove(path_.c_str()); }
  // One file per test and process: ctest runs the tests of this fixture in parallel.
  const std::string path_ = ::testing::TempDir() + "/sidecar-token-" +
                            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                            std::to_string(::getpid());
  FakeClock clock_;
  FakeSts sts_;
  TokenFile file_{path_};
  // Every draw is draw_: 0 puts the refresh point at exactly 80% and each retry delay at its top.
  double draw_ = 0;
  RefreshOptions Options(RefreshOptions o = {}) {
    o.random = [this] { return draw_; };
    return o;
  }
  TokenServer server_{file_, sts_, clock_, Options()};
};

// Tests that the answer has oauth2.Token's JSON shape with an RFC 3339 expiry.
TEST_F(TokenServerTest, AnswersOauth2TokenJson) {
  auto r = server_.Handle({});
  ASSERT_EQ(r.status, 200);
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["access_token"], "access-1");
  EXPECT_EQ(j["token_type"], "Bearer");
  EXPECT_EQ(j["expiry"], FormatRfc3339Nano(clock_.Now() + std::chrono::seconds(1000)));
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(sts_.last_subject, "subject-jwt");
}

// Tests that the token is served from cache until 80% of its lifetime, then refreshed.
TEST_F(TokenServerTest, CachesUntilEightyPercent) {
  EXPECT_EQ(server_.Get()->access_token, "access-1");
  clock_.Advance(std::chrono::seconds(799));
  EXPECT_EQ(server_.Get()->access_token, "access-1");
  EXPECT_EQ(sts_.calls, 1);
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(server_.Get()->access_token, "access-2");
  EXPECT_EQ(sts_.calls, 2);
}

// Tests that concurrent callers during an exchange share one STS call.
TEST_F(TokenServerTest, SingleFlightUnderConcurrency) {
  {
    std::lock_guard lock(sts_.mu);
    sts_.hold = true;
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] { ok += server_.Get().ok() ? 1 : 0; });
  }
  while (true) {
    std::lock_guard lock(sts_.mu);
    if (sts_.calls == 1) break;
  }
  {
    std::lock_guard lock(sts_.mu);
    sts_.hold = false;
  }
  sts_.cv.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(sts_.calls, 1);
}

// Tests that a failed refresh serves the still-valid cached token, and fails once it expired.
TEST_F(TokenServerTest, ServesCachedTokenWhileRefreshFails) {
  ASSERT_TRUE(server_.Get().ok());
  sts_.fail = absl::UnavailableError("gateway down");
  clock_.Advance(std::chrono::seconds(900));
  EXPECT_EQ(server_.Get()->access_token, "access-1");
  clock_.Advance(std::chrono::seconds(100));
  auto r = server_.Handle({});
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find("gateway down"), std::string::npos);
  EXPECT_EQ(r.body.find("access-1"), std::string::npos);
}

// Tests the sidecar's counters: answers by code, cache hits and misses, exchanges by outcome, and
// token file loads (one per kubelet rotation, not one per exchange).
TEST_F(TokenServerTest, CountsAnswersCacheExchangesAndFileLoads) {
  prometheus::Registry registry;
  SidecarMetrics metrics(registry);
  TokenServer server(file_, sts_, clock_, Options({.metrics = &metrics}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(server.Handle({}).status, 200);
  EXPECT_EQ(metrics.requests_ok.Value(), 5);
  EXPECT_EQ(metrics.cache_misses.Value(), 1);
  EXPECT_EQ(metrics.cache_hits.Value(), 4);
  EXPECT_EQ(metrics.token_file_reloads_total.Value(), 1);
  EXPECT_EQ(metrics.sts_exchanges_total.Add({{"outcome", "ok"}}).Value(), 1);

  clock_.Advance(std::chrono::seconds(1001));
  sts_.fail = absl::PermissionDeniedError("STS answered HTTP 400: invalid_target");
  EXPECT_EQ(server.Handle({}).status, 500);
  EXPECT_EQ(metrics.requests_error.Value(), 1);
  EXPECT_EQ(metrics.sts_exchanges_total.Add({{"outcome", "rejected"}}).Value(), 1);
  EXPECT_EQ(metrics.token_file_reloads_total.Value(), 1);  // same file: not reloaded

  clock_.Advance(std::chrono::seconds(1));  // the backoff after one failure
  std::remove(path_.c_str());
  EXPECT_EQ(server.Handle({}).status, 500);
  EXPECT_EQ(metrics.sts_exchanges_total.Add({{"outcome", "token_file"}}).Value(), 1);
}

// Tests that between 80% and 100% of the lifetime a refresh in flight does not hold other
// callers (they get the still-valid token), and that a failed refresh backs off instead of asking
// the STS on every request.
TEST_F(TokenServerTest, ValidTokenAnswersDuringRefreshAndFailuresBackOff) {
  ASSERT_TRUE(server_.Get().ok());
  clock_.Advance(std::chrono::seconds(850));
  {
    std::lock_guard lock(sts_.mu);
    sts_.hold = true;
  }
  std::thread refresher([&] { EXPECT_EQ(server_.Get()->access_token, "access-2"); });
  while (true) {
    std::lock_guard lock(sts_.mu);
    if (sts_.calls == 2) break;
  }
  EXPECT_EQ(server_.Get()->access_token, "access-1");  // not blocked by the refresh
  {
    std::lock_guard lock(sts_.mu);
    sts_.hold = false;
  }
  sts_.cv.notify_all();
  refresher.join();

  clock_.Advance(std::chrono::seconds(850));  // access-2 is due for refresh
  sts_.fail = absl::UnavailableError("gateway down");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(server_.Get()->access_token, "access-2");
  EXPECT_EQ(sts_.calls, 3);                 // one failed attempt, then the backoff
  clock_.Advance(std::chrono::seconds(1));  // the first failure's backoff
  EXPECT_EQ(server_.Get()->access_token, "access-2");
  EXPECT_EQ(sts_.calls, 4);
}

// Tests that each token's refresh point is drawn between 70% and 80% of its lifetime (the
// default 10% jitter): a draw of 0.5 refreshes at 75%, the next token's draw at 70%.
TEST_F(TokenServerTest, RefreshPointIsDrawnPerToken) {
  draw_ = 0.5;
  EXPECT_EQ(server_.Get()->access_token, "access-1");
  EXPECT_EQ(server_.NextAttempt(), clock_.Now() + std::chrono::seconds(750));
  clock_.Advance(std::chrono::seconds(749));
  EXPECT_EQ(server_.Get()->access_token, "access-1");
  draw_ = std::nextafter(1.0, 0.0);
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(server_.Get()->access_token, "access-2");
  clock_.Advance(std::chrono::milliseconds(699'999));
  EXPECT_EQ(server_.Get()->access_token, "access-2");
  clock_.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(server_.Get()->access_token, "access-3");
  EXPECT_EQ(sts_.calls, 3);
}

// Tests that with jitter off the refresh point is exactly 80% whatever the draws.
TEST_F(TokenServerTest, NoJitterRefreshesAtExactlyEightyPercent) {
  draw_ = 0.9;
  TokenServer server(file_, sts_, clock_, Options({.refresh_jitter_percent = 0}));
  ASSERT_TRUE(server.Get().ok());
  EXPECT_EQ(server.NextAttempt(), clock_.Now() + std::chrono::seconds(800));
}

// Tests the backoff with no token to serve: the error comes back at once without asking the
// STS until NextAttempt(), the delays double from 1 s up to 30 s, and a success resets them.
TEST_F(TokenServerTest, FailuresBackOffExponentiallyAndSuccessResets) {
  sts_.fail = absl::UnavailableError("gateway down");
  const std::chrono::seconds want[] = {std::chrono::seconds(1),  std::chrono::seconds(2),
                                       std::chrono::seconds(4),  std::chrono::seconds(8),
                                       std::chrono::seconds(16), std::chrono::seconds(30),
                                       std::chrono::seconds(30)};
  int calls = 0;
  for (const auto delay : want) {
    SCOPED_TRACE(delay.count());
    EXPECT_FALSE(server_.Get().ok());
    EXPECT_EQ(sts_.calls, ++calls);
    EXPECT_EQ(server_.NextAttempt(), clock_.Now() + delay);
    clock_.Advance(delay - std::chrono::milliseconds(1));
    auto early = server_.Handle({});
    EXPECT_EQ(early.status, 500);
    EXPECT_NE(early.body.find("gateway down"), std::string::npos);
    EXPECT_EQ(sts_.calls, calls) << "asked the STS during the backoff";
    clock_.Advance(std::chrono::milliseconds(1));
  }
  sts_.fail = absl::OkStatus();
  ASSERT_TRUE(server_.Get().ok());
  clock_.Advance(std::chrono::seconds(1000));  // expired: the next exchange fails afresh
  sts_.fail = absl::UnavailableError("gateway down");
  EXPECT_FALSE(server_.Get().ok());
  EXPECT_EQ(server_.NextAttempt(), clock_.Now() + std::chrono::seconds(1));
}

// Tests that a new subject token (kubelet replaced the file) ends the backoff of a refusal of
// the old one at once, and that a Retry-After is kept even then.
TEST_F(TokenServerTest, NewSubjectTokenEndsTheBackoff) {
  sts_.fail = absl::InvalidArgumentError("invalid_target: audience is not allowed");
  EXPECT_FALSE(server_.Get().ok());
  EXPECT_FALSE(server_.Get().ok());
  EXPECT_EQ(sts_.calls, 1) << "asked the STS again for the same token during the backoff";
  std::ofstream(path_) << "the-pods-real-token\n";
  sts_.fail = absl::OkStatus();
  ASSERT_TRUE(server_.Get().ok());
  EXPECT_EQ(sts_.calls, 2);
  EXPECT_EQ(sts_.last_subject, "the-pods-real-token");

  clock_.Advance(std::chrono::seconds(1000));  // expired; now the STS asks to wait
  sts_.fail = WithRetryAfter(absl::ResourceExhaustedError("STS answered HTTP 429"),
                             std::chrono::seconds(7));
  EXPECT_FALSE(server_.Get().ok());
  std::ofstream(path_) << "yet-another-token\n";
  EXPECT_FALSE(server_.Get().ok());
  EXPECT_EQ(sts_.calls, 3) << "a new token does not override the STS's Retry-After";
}

// Tests that a Retry-After from the STS (429 or 503) holds the next attempt back at least that
// long, spread above it by up to half the backoff, and that a huge one is capped.
TEST_F(TokenServerTest, HonoursRetryAfter) {
  sts_.fail = WithRetryAfter(absl::ResourceExhaustedError("STS answered HTTP 429"),
                             std::chrono::seconds(7));
  draw_ = 0.5;
  EXPECT_FALSE(server_.Get().ok());
  // Backoff 1 s drawn to 0.75 s; Retry-After 7 s spread by 0.5 * 0.5 s.
  EXPECT_EQ(server_.NextAttempt(), clock_.Now() + std::chrono::milliseconds(7250));
  clock_.Advance(std::chrono::milliseconds(7249));
  EXPECT_FALSE(server_.Get().ok());
  EXPECT_EQ(sts_.calls, 1);
  clock_.Advance(std::chrono::milliseconds(1));
  sts_.fail =
      WithRetryAfter(absl::UnavailableError("STS answered HTTP 503"), std::chrono::hours(24));
  EXPECT_FALSE(server_.Get().ok());
  EXPECT_EQ(sts_.calls, 2);
  // Second failure: backoff 2 s; Retry-After capped at kMaxRetryAfter, spread by 0.5 * 1 s.
  EXPECT_EQ(server_.NextAttempt(), clock_.Now() + kMaxRetryAfter + std::chrono::milliseconds(500));
}

// Tests RetryDelay's table: doubling, the cap, the jittered upper half, Retry-After as a floor,
// and no spread with jitter off.
TEST(RetryDelayTest, DoublesCapsSpreadsAndHonoursRetryAfter) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const RefreshOptions on{}, off{.refresh_jitter_percent = 0};
  struct Case {
    int failures;
    std::optional<seconds> retry_after;
    bool jitter;
    double d1, d2;
    milliseconds want;
  } cases[] = {
      {1, std::nullopt, true, 0.0, 0.0, milliseconds(1000)},
      {1, std::nullopt, true, 1.0, 0.0, milliseconds(500)},  // the bottom of the upper half
      {3, std::nullopt, true, 0.5, 0.0, milliseconds(3000)},
      {6, std::nullopt, true, 0.0, 0.0, milliseconds(30000)},
      {60, std::nullopt, true, 0.0, 0.0, milliseconds(30000)},  // no overflow
      {1, seconds(2), true, 0.0, 1.0, milliseconds(2500)},
      {5, seconds(2), true, 0.0, 0.0, milliseconds(16000)},  // the backoff is longer already
      {1, seconds(0), true, 0.0, 0.0, milliseconds(1000)},
      {1, std::nullopt, false, 1.0, 1.0, milliseconds(1000)},
      {1, seconds(2), false, 1.0, 1.0, milliseconds(2000)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.failures) + (c.jitter ? " jitter" : " fixed"));
    EXPECT_EQ(RetryDelay(c.failures, c.retry_after, c.jitter ? on : off, c.d1, c.d2), c.want);
  }
}

// Tests that with single flight off (bench/token's baseline) concurrent callers each exchange.
TEST_F(TokenServerTest, WithoutSingleFlightEveryCallerExchanges) {
  TokenServer server(file_, sts_, clock_, Options({.single_flight = false}));
  {
    std::lock_guard lock(sts_.mu);
    sts_.hold = true;
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { ok += server.Get().ok() ? 1 : 0; });
  while (true) {
    std::lock_guard lock(sts_.mu);
    if (sts_.calls == 4) break;
  }
  {
    std::lock_guard lock(sts_.mu);
    sts_.hold = false;
  }
  sts_.cv.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(sts_.calls, 4);
}

// Tests Go's RFC3339Nano formatting (UTC, trailing zeros trimmed).
TEST(FormatRfc3339NanoTest, MatchesGo) {
  using std::chrono::system_clock;
  EXPECT_EQ(FormatRfc3339Nano(system_clock::time_point(std::chrono::seconds(1800000000))),
            "2027-01-15T08:00:00Z");
  EXPECT_EQ(FormatRfc3339Nano(system_clock::time_point(std::chrono::seconds(1800000000) +
                                                       std::chrono::milliseconds(120))),
            "2027-01-15T08:00:00.12Z");
}

}  // namespace
}  // namespace wisp::sidecar
