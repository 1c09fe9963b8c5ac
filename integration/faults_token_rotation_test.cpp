// Faults: two wisp-token replicas on the same wisp_keys bucket race at start (who creates the key
// set) and at key rotation (--key-rotation-period 1m, the smallest the binary accepts), while a
// client keeps issuing tokens through the queue group.
//
// What it proves:
//   - exactly one key set is created and exactly one new key is made in the period: the key-set
//     entry is written exactly three times (create, the next keys published at half the period,
//     the switch to them), the replicas' rotation counters sum to 1, and the JWKS holds exactly
//     two keys per algorithm (the retired one and the new one);
//   - the new key was in the JWKS before the first token that carries it;
//   - every token either replica issued, before, during and after the rotation, is verifiable:
//     both through wisp.v1.token.review and locally against the JWKS the service publishes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
namespace subjects = bus::subjects;

// The binary's minimum period plus its 10 s rotation tick plus start-up slack.
constexpr auto kRotationDeadline = 110s;

double SumMetric(const std::string& text, const std::string& name) {
  double sum = 0;
  std::regex line("^" + name + R"((\{[^}]*\})? ([0-9.e+]+)$)");
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) sum += std::stod(m[2]);
  }
  return sum;
}

// Tests that two replicas racing at start and at rotation make exactly one key set and one new
// key, and that every token issued meanwhile verifies.
TEST(FaultsTokenRotationTest, ReplicasRaceAtRotation) {
  TempDir dir("wisp-rot");
  const std::string kek = dir.path() + "/kek";
  {
    std::ifstream random("/dev/urandom", std::ios::binary);
    std::string bytes(32, '\0');
    random.read(bytes.data(), 32);
    std::ofstream(kek, std::ios::binary) << bytes;
    ASSERT_EQ(::chmod(kek.c_str(), 0600), 0);
  }
  const std::string policy = dir.path() + "/policy.yaml";
  std::ofstream(policy) << "defaultAudiences: [wisp]\n"
                           "namespaces:\n"
                           "  \"*\": {audiences: [wisp, vault], maxExpirationSeconds: 7200}\n";
  auto nats = NatsServer::Start();
  ASSERT_TRUE(nats.ok()) << nats.status();

  // Watch the key-set entry before any replica exists: every write to it is seen.
  auto client = bus::NatsBus::Connect(TestBusOptions({(*nats)->url()}, "it-client"));
  ASSERT_TRUE(client.ok()) << client.status();
  auto kv = (*client)->OpenBucket({.name = std::string(bus::buckets::kKeys), .history = 5});
  ASSERT_TRUE(kv.ok()) << kv.status();
  std::mutex mu;
  std::set<uint64_t> keyset_writes;
  auto watch = (*kv)->Watch("keyset", [&](const bus::KvEntry& e) {
    if (e.key.empty() || e.deleted) return;
    std::lock_guard lock(mu);
    keyset_writes.insert(e.revision);
  });
  ASSERT_TRUE(watch.ok()) << watch.status();

  // Both replicas start at the same moment.
  std::vector<std::unique_ptr<Process>> replicas;
  std::vector<int> metrics_ports;
  for (int i = 0; i < 2; ++i) {
    metrics_ports.push_back(FreePort());
    auto p = Process::Start({.path = BinaryPath("wisp-token"),
                             .args = {"--nats-url", (*nats)->url(), "--key-encryption-key-file",
                                      kek, "--key-rotation-period", "1m", "--policy-file", policy,
                                      "--issuer-url", "https://wisp.test", "--metrics-address",
                                      "127.0.0.1:" + std::to_string(metrics_ports.back())}});
    ASSERT_TRUE(p.ok()) << p.status();
    replicas.push_back(*std::move(p));
  }
  for (int port : metrics_ports) {
    ASSERT_TRUE(WaitForHttp("127.0.0.1", port, "/readyz", 30s).ok())
        << replicas[0]->Log() << replicas[1]->Log();
  }

  auto issue = [&](int i) -> absl::StatusOr<v1::IssueResponse> {
    v1::IssueRequest req;
    req.mutable_subject()->set_namespace_("default");
    req.mutable_subject()->set_service_account("web");
    req.mutable_subject()->set_pod_name("web-" + std::to_string(i));
    req.mutable_subject()->set_pod_uid("uid-" + std::to_string(i));
    req.add_audiences("wisp");
    req.set_expiration_seconds(3600);
    return bus::Call<v1::IssueResponse>(**client, subjects::kTokenIssue, req, 5s);
  };
  // Published keys per algorithm (wisp-token keeps one active key for each of RS256 and ES256).
  auto keys_by_alg = [&]() -> std::map<std::string, int> {
    std::map<std::string, int> out;
    auto keys = bus::Call<v1::KeysResponse>(**client, subjects::kTokenKeys, v1::KeysRequest(), 5s);
    if (!keys.ok()) return out;
    auto set = jwt::KeySet::FromJwks(keys->jwks_json());
    if (!set.ok()) return out;
    for (const auto& [kid, key] : set->keys())
      out[std::string(jwt::AlgorithmName(key.algorithm()))]++;
    return out;
  };

  std::vector<v1::IssueResponse> issued;
  std::set<std::string> kids;
  const auto initial = keys_by_alg();
  ASSERT_FALSE(initial.empty());
  for (const auto& [alg, count] : initial) {
    ASSERT_EQ(count, 1) << "the start-up race made more than one " << alg << " key";
  }
  const auto start = std::chrono::steady_clock::now();
  int i = 0;
  int issue_errors = 0;
  auto last_jwks_check = start;
  bool rotated = false;
  std::chrono::steady_clock::time_point rotated_at;
  // Kids seen in the published JWKS so far (polled every 500 ms while the old key signs).
  std::set<std::string> published;
  const auto poll_jwks = [&] {
    auto keys = bus::Call<v1::KeysResponse>(**client, subjects::kTokenKeys, v1::KeysRequest(), 5s);
    if (!keys.ok()) return;
    auto set = jwt::KeySet::FromJwks(keys->jwks_json());
    if (!set.ok()) return;
    for (const auto& [kid, key] : set->keys()) published.insert(kid);
  };
  poll_jwks();
  while (std::chrono::steady_clock::now() - start < kRotationDeadline) {
    auto r = issue(i++);
    if (r.ok()) {
      if (kids.insert(r->key_id()).second && kids.size() > 1) {
        // A new kid on a token: it must have been published before (the next key).
        EXPECT_TRUE(published.count(r->key_id()))
            << "key " << r->key_id() << " signed before it was in the JWKS";
        rotated = true;
        rotated_at = std::chrono::steady_clock::now();
      }
      issued.push_back(*std::move(r));
    } else {
      ++issue_errors;
      ADD_FAILURE() << "issue failed: " << r.status();
    }
    const auto now = std::chrono::steady_clock::now();
    if (!rotated && now - last_jwks_check > 500ms) {
      last_jwks_check = now;
      poll_jwks();
    }
    // Keep issuing for a while after the rotation (tokens from both keys, both replicas).
    if (rotated && now - rotated_at > 3s) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(rotated) << "no rotation within " << kRotationDeadline.count() << "s";
  EXPECT_EQ(issue_errors, 0);

  // Exactly one new key per algorithm: two key-set writes, the old and the new key of each
  // algorithm published, one rotation counted in total.
  for (const auto& [alg, count] : keys_by_alg()) {
    EXPECT_EQ(count, 2) << alg << ": want the retired key and exactly one new one";
  }
  EXPECT_EQ(kids.size(), 2u) << "tokens were signed by more than the old and the new key";
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(keyset_writes.size(), 3u)
        << "key-set entry written other than create, publish next, switch";
  }
  double rotations = 0;
  for (int port : metrics_ports) {
    auto m = HttpGet("127.0.0.1", port, "/metrics", 5s);
    ASSERT_TRUE(m.ok()) << m.status();
    rotations += SumMetric(m->body, "wisp_token_key_rotations_total");
  }
  EXPECT_EQ(rotations, 1) << "replicas rotated more than once in total";

  // Every token verifies: locally against the published JWKS, and through review (either replica).
  auto keys = bus::Call<v1::KeysResponse>(**client, subjects::kTokenKeys, v1::KeysRequest(), 5s);
  ASSERT_TRUE(keys.ok()) << keys.status();
  auto jwks = jwt::KeySet::FromJwks(keys->jwks_json());
  ASSERT_TRUE(jwks.ok()) << jwks.status();
  const int64_t now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  int unverifiable = 0;
  for (const auto& t : issued) {
    auto local =
        jwt::Verify(t.token(), *jwks,
                    {.issuer = "https://wisp.test", .audiences = {"wisp"}, .now_unix = now_unix});
    v1::ReviewRequest req;
    req.set_token(t.token());
    auto review = bus::Call<v1::ReviewResponse>(**client, subjects::kTokenReview, req, 5s);
    if (!local.ok() || !review.ok() || !review->authenticated()) {
      if (++unverifiable <= 3) {
        ADD_FAILURE() << "token from key " << t.key_id() << " does not verify: "
                      << (local.ok() ? "" : std::string(local.status().message())) << " "
                      << (review.ok() ? review->error() : std::string(review.status().message()));
      }
    }
  }
  EXPECT_EQ(unverifiable, 0) << "of " << issued.size() << " tokens";
  std::printf("[ rotation ] %zu tokens from %zu keys, rotation after %llds\n", issued.size(),
              kids.size(),
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::seconds>(rotated_at - start).count()));
}

}  // namespace
}  // namespace wisp::integration
