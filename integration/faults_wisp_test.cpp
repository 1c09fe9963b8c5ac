// Faults with wisp itself (issue 24, item 2): a 3-node NATS cluster (JetStream, routes over mutual
// TLS, clients over TLS with verified client certificates), every wisp service twice (each instance
// given another node's URL) with --jetstream-replicas 3, and load on every path at once, while
// NATS nodes and service replicas are SIGKILLed:
//
//   load, from start to end                  faults, in order
//   admission  /mutate (loader-pod) and      F1  SIGKILL NATS node n0 (wisp-token, wisp-gateway
//              /validate (a pod-network pod)     and the second wisp-populator were given its URL);
//              over HTTPS to both gateways       8 s later it starts again on its store
//   tokens     wisp.v1.token.issue on the    F2  SIGKILL one replica of each service: the second
//              bus, RFC 8693 exchanges over      wisp-token, wisp-policy and wisp-gateway (node-b's
//              HTTPS to both gateways            CSI plugin), and the wisp-populator that holds the
//   CSI        token volumes published and       import's file open; 8 s later they start again
//              unpublished on both gateways' F3  SIGKILL the NATS node that leads WISP_POPULATE
//              sockets, and long-lived ones      (read from /jsz); 8 s later it starts again
//              rotated by the gateways
//   import     a deterministic image (1 GiB; WISP_FAULTS_IMPORT_BYTES for quick runs) served
//              over HTTP, throttled to last about a minute so that every fault lands in it
//
// What it asserts, and prints one line for each:
//   - admission: 0 reviews failed beyond the failure mode (closed). Counted as kube-apiserver
//     behind a Service counts: an attempt with no HTTP answer (refused, reset, TLS or read error)
//     or a 429/500/502/503/504 is retried, up to 5 attempts 500 ms x1.5 apart, on the other
//     gateway; a review fails when no attempt answers, or the answer is wrong (another uid, not
//     allowed, no patch on /mutate). A fail-closed answer ("wisp policy unavailable", code 500)
//     is the configured failure mode: counted and printed, not a failure;
//   - tokens: every issue request and every exchange is answered (a caller retries within 15 s),
//     and every token seen (bus, STS, CSI publish, CSI rotation) has its own jti: 0 lost, 0
//     duplicated;
//   - keys: every one of those tokens, those signed before the first loss included, verifies
//     against the JWKS both gateways serve after the last fault, and every key published before
//     the first loss is still published: 0 keys lost;
//   - CSI: every publish succeeds (the kubelet retries), no token file is ever unreadable or torn,
//     and every long-lived volume keeps rotating, once at least after the last fault;
//   - import: the volume succeeds with the image's sha256 (sha256sum of both files), and no poll
//     of its status (every 100 ms throughout) sees SUCCEEDED before disk.img is whole: 0 early.
//
// Token rotation is every 10-20 s instead of 8 minutes: the gateways run under libfaketime 460 s
// ahead (wall clock only), so every token they get (600 s, the least wisp-token issues) is already
// 460 s old by their clock and due at 480 s minus jitter. Runs as root (tmpfs mounts).
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "admission/admission_review.hpp"
#include "csi_client.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/populator/testing/test_http_server.hpp"
#include "wisp/v1/token.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::integration {
namespace {

namespace fs = std::filesystem;
namespace subjects = bus::subjects;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr const char* kLibFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
constexpr int64_t kDefaultImportBytes = 1ll << 30;
// The import is throttled to last about this long, so that every fault lands in it.
constexpr int64_t kImportSeconds = 60;
constexpr auto kDown = 8s;          // how long a killed node or replica stays down
constexpr auto kSettle = 5s;        // load between one recovery and the next fault
constexpr auto kRetryWindow = 15s;  // how long a token caller retries
constexpr int kLongVolumesPerNode = 3;
constexpr const char* kIssuer = "wisp-faults";

// wisp-token's policy: namespace "faults" may ask for vault and wisp-sts tokens and exchange a
// wisp-sts token for storage.wisp.dev.
constexpr const char* kTokenPolicy = R"(maxExpirationSeconds: 86400
namespaces:
  "*": {audiences: [vault, wisp-sts]}
exchange:
  accessTokenLifetimeSeconds: 1800
  subjectAudiences: [wisp-sts]
  rules:
    - namespace: faults
      serviceAccounts: ["*"]
      audiences: [storage.wisp.dev]
      scopes: [https://www.googleapis.com/auth/cloud-platform]
)";

int64_t ImportBytes() {
  const char* env = std::getenv("WISP_FAULTS_IMPORT_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultImportBytes;
  return std::max<int64_t>(std::strtoll(env, nullptr, 10), 1 << 20);
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string FormEncode(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// Every token the test saw, by its text, with where it came from and in which phase (0 = before
// the first fault); jti counted across distinct tokens.
class TokenLedger {
 public:
  void Add(const std::string& token, const std::string& source, int phase) {
    auto decoded = jwt::Decode(token);
    std::lock_guard lock(mu_);
    if (!decoded.ok()) {
      ++malformed_;
      return;
    }
    if (!tokens_.emplace(token, Entry{source, phase}).second) return;  // seen before (a re-read)
    const std::string jti = decoded->claims.value("jti", "");
    if (jti.empty()) {
      ++no_jti_;
      return;
    }
    if (++jtis_[jti] == 2) ++duplicated_;
  }
  struct Entry {
    std::string source;
    int phase = 0;
  };
  std::map<std::string, Entry> tokens() {
    std::lock_guard lock(mu_);
    return tokens_;
  }
  int malformed() {
    std::lock_guard lock(mu_);
    return malformed_;
  }
  int no_jti() {
    std::lock_guard lock(mu_);
    return no_jti_;
  }
  int duplicated() {
    std::lock_guard lock(mu_);
    return duplicated_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, Entry> tokens_;
  std::map<std::string, int> jtis_;
  int malformed_ = 0, no_jti_ = 0, duplicated_ = 0;
};

// Counts of one path: logical operations, attempts, and how they ended.
struct Tally {
  std::atomic<int> ops{0}, attempts{0}, ok{0}, failure_mode{0}, failed{0};
  std::mutex mu;
  std::vector<std::string> failures;  // the first few, for the report
  void Fail(const std::string& why) {
    ++failed;
    std::lock_guard lock(mu);
    if (failures.size() < 5) failures.push_back(why);
  }
  std::string FirstFailures() {
    std::lock_guard lock(mu);
    std::string out;
    for (const auto& f : failures) out += "\n  " + f;
    return out;
  }
};

// A kubelet-like view of one token volume's file: each distinct token read, and reads that found
// no complete token.
struct WatchedVolume {
  int node = 0;
  std::string id, target;
  std::string last;
  int rotations = 0;  // distinct tokens after the first
  int rotations_after_last_fault = 0;
  int bad_reads = 0;
};

// The node (index) leading `stream`, from the /jsz of any node that answers; -1 when none knows.
int StreamLeader(NatsCluster& cluster, const std::string& stream) {
  for (int i = 0; i < cluster.size(); ++i) {
    auto r =
        HttpGet("127.0.0.1", cluster.node(i).monitor_port(), "/jsz?accounts=true&streams=true", 2s);
    if (!r.ok() || r->status != 200) continue;
    auto j = Json::parse(r->body, nullptr, false);
    if (j.is_discarded()) continue;
    for (const auto& account : j.value("account_details", Json::array())) {
      for (const auto& s : account.value("stream_detail", Json::array())) {
        if (s.value("name", "") != stream || !s.contains("cluster")) continue;
        const std::string leader = s["cluster"].value("leader", "");
        if (leader.size() > 1 && leader[0] == 'n') return std::atoi(leader.c_str() + 1);
      }
    }
  }
  return -1;
}

// Whether process `pid` has a file whose path contains `needle` open.
bool HasOpen(pid_t pid, const std::string& needle) {
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code rec;
    if (fs::read_symlink(fd.path(), rec).string().find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string Sha256sum(const std::string& path) {
  CommandResult r = RunCommand("sha256sum '" + path + "'");
  return r.exit_code == 0 ? r.output.substr(0, 64) : "";
}

bool IsJwt(const std::string& t) { return std::count(t.begin(), t.end(), '.') == 2; }

class FaultsWispTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!stack_) return;
    // Mounts a failed test left behind go before the stack's directory.
    std::vector<std::string> leftovers;
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string a, b, c, r, mp;
      f >> a >> b >> c >> r >> mp;
      if (mp.compare(0, stack_->dir().size(), stack_->dir()) == 0) leftovers.push_back(mp);
    }
    for (auto it = leftovers.rbegin(); it != leftovers.rend(); ++it)
      ::umount2(it->c_str(), MNT_DETACH);
  }
  std::unique_ptr<Stack> stack_;
};

// Tests that wisp on a 3-node NATS cluster over TLS, two replicas of each service, loses no
// admission beyond its failure mode, no token, no key and no import byte, and reports no volume
// ready early, through a node kill and restart, a kill of one replica of each service and a kill
// of the node leading WISP_POPULATE, all under load on every path at once.
TEST_F(FaultsWispTest, ServicesKeepEveryPromiseThroughNodeAndReplicaLoss) {
  ASSERT_TRUE(fs::exists(kLibFaketime)) << kLibFaketime << " missing: scripts/install-deps";
  ASSERT_EQ(::geteuid(), 0u) << "needs root for the CSI tmpfs mounts";
  const int64_t image_bytes = ImportBytes();
  TempDir work("wisp-faults");
  const std::string& w = work.path();

  // The image: AES-CTR of zeros under a fixed key, as many bytes as asked; its sha256 by
  // sha256sum.
  const auto made = Clock::now();
  CommandResult r = RunCommand(
      "openssl enc -aes-128-ctr -nosalt -K 000102030405060708090a0b0c0d0e0f "
      "-iv 00000000000000000000000000000000 -in /dev/zero 2>/dev/null | head -c " +
      std::to_string(image_bytes) + " > '" + w + "/image.raw'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(static_cast<int64_t>(fs::file_size(w + "/image.raw")), image_bytes);
  const std::string image_sha = Sha256sum(w + "/image.raw");
  ASSERT_EQ(image_sha.size(), 64u);
  std::printf("[ faults   ] image: %lld bytes, sha256 %s, made in %.1f s\n",
              static_cast<long long>(image_bytes), image_sha.c_str(), Since(made));
  populator::testing::TestHttpServer http;
  populator::testing::ServeOptions throttle;
  throttle.bytes_per_second = static_cast<uint64_t>(image_bytes / kImportSeconds);
  http.Serve("/image.raw", w + "/image.raw", throttle);
  ASSERT_TRUE(http.Start().ok());

  std::ofstream(w + "/token-policy.yaml") << kTokenPolicy;
  StackOptions so;
  so.replicas = 2;
  so.nats_nodes = 3;
  so.nats_tls = true;
  so.failure_mode = "closed";
  for (const char* s : {"wisp-token", "wisp-policy", "wisp-populator", "wisp-gateway"}) {
    so.extra_args[s] = {"--jetstream-replicas", "3"};
  }
  so.extra_args["wisp-token"].insert(so.extra_args["wisp-token"].end(),
                                     {"--policy-file", w + "/token-policy.yaml"});
  // A killed populator's job comes back after 5 s; checkpoints every 32 MiB for the resume.
  so.extra_args["wisp-populator"].insert(
      so.extra_args["wisp-populator"].end(),
      {"--job-ack-wait", "5s", "--checkpoint-interval", std::to_string(32 << 20),
       "--checkpoint-min-interval", "0s"});
  // Under scripts/sanitize the gateway is ASan-built, and ASan refuses to start unless its runtime
  // comes first in the library list; libfaketime's preload comes before it, harmlessly.
  const char* asan = std::getenv("ASAN_OPTIONS");
  so.env["wisp-gateway"] = {
      {"LD_PRELOAD", kLibFaketime},
      {"FAKETIME", "+460"},
      {"FAKETIME_DONT_FAKE_MONOTONIC", "1"},
      {"ASAN_OPTIONS", (asan != nullptr && *asan != '\0' ? std::string(asan) + ":" : "") +
                           "verify_asan_link_order=0"}};
  const auto started_at = Clock::now();
  auto started = Stack::Start(so);
  ASSERT_TRUE(started.ok()) << started.status();
  stack_ = *std::move(started);
  Stack& stack = *stack_;
  NatsCluster& cluster = *stack.cluster();
  std::printf("[ faults   ] stack: 3 NATS nodes over TLS, 2 x 4 services, ready in %.1f s\n",
              Since(started_at));

  bus::NatsBusOptions bo;
  bo.servers = stack.nats_urls();
  bo.name = "faults-test";
  bo.tls_ca_file = stack.nats_ca_file();
  bo.tls_cert_file = stack.nats_client_cert();
  bo.tls_key_file = stack.nats_client_key();
  bo.reconnect_wait = 50ms;
  bo.reconnect_wait_max = 500ms;
  bo.ping_interval = 1000ms;
  auto connected = bus::NatsBus::Connect(bo);
  ASSERT_TRUE(connected.ok()) << connected.status();
  bus::NatsBus& client = **connected;

  TokenLedger ledger;
  std::atomic<int> phase{0};  // 0 before F1, then the number of the last fault begun
  std::atomic<bool> stop{false};

  auto issue = [&](const std::string& sa, const std::string& pod,
                   const std::string& audience) -> absl::StatusOr<v1::IssueResponse> {
    v1::IssueRequest req;
    req.mutable_subject()->set_namespace_("faults");
    req.mutable_subject()->set_service_account(sa);
    req.mutable_subject()->set_pod_name(pod);
    req.mutable_subject()->set_pod_uid("uid-" + pod);
    req.add_audiences(audience);
    req.set_expiration_seconds(3600);
    return bus::Call<v1::IssueResponse>(client, subjects::kTokenIssue, req, 5s);
  };

  // ---- pre-flight on a healthy stack: the answers every later one is held to ----
  const Json pod = LoadManifest("loader-pod.yaml");
  const Json plain = LoadManifest("loader-pod-no-hostnetwork.yaml");
  for (int g = 0; g < 2; ++g) {
    auto m =
        stack.Https("POST", "/mutate?timeout=10s", AdmissionReviewFor(pod, "pre-m"), {}, 15s, g);
    ASSERT_TRUE(m.ok() && m->status == 200) << (m.ok() ? m->body : m.status().ToString());
    Json mj = Json::parse(m->body);
    ASSERT_EQ(mj["response"]["allowed"], true) << m->body;
    ASSERT_TRUE(mj["response"].contains("patch")) << m->body;
    auto v = stack.Https("POST", "/validate?timeout=10s", AdmissionReviewFor(plain, "pre-v"), {},
                         15s, g);
    ASSERT_TRUE(v.ok() && v->status == 200) << (v.ok() ? v->body : v.status().ToString());
    ASSERT_EQ(Json::parse(v->body)["response"]["allowed"], true) << v->body;
  }
  constexpr int kSubjects = 8;
  std::vector<std::string> exchange_forms;
  for (int i = 0; i < kSubjects; ++i) {
    auto subject =
        issue("exchanger-" + std::to_string(i), "exchanger-" + std::to_string(i), "wisp-sts");
    ASSERT_TRUE(subject.ok()) << subject.status();
    ledger.Add(subject->token(), "issue", 0);
    exchange_forms.push_back(
        "grant_type=" + FormEncode("urn:ietf:params:oauth:grant-type:token-exchange") +
        "&subject_token=" + FormEncode(subject->token()) + "&subject_token_type=" +
        FormEncode("urn:ietf:params:oauth:token-type:jwt") + "&audience=storage.wisp.dev&scope=" +
        FormEncode("https://www.googleapis.com/auth/cloud-platform"));
  }
  auto jwks_kids = [&](int g) -> std::set<std::string> {
    std::set<std::string> kids;
    auto resp = stack.Https("GET", "/openid/v1/jwks", "", {}, 5s, g);
    if (!resp.ok() || resp->status != 200) return kids;
    auto doc = Json::parse(resp->body, nullptr, false);
    if (!doc.is_object() || !doc["keys"].is_array()) return kids;
    for (const auto& k : doc["keys"]) kids.insert(k.value("kid", ""));
    return kids;
  };
  const std::set<std::string> kids_before = jwks_kids(0);
  ASSERT_FALSE(kids_before.empty());

  // Long-lived token volumes on both nodes' CSI sockets, rotated by the gateways.
  std::vector<std::unique_ptr<CsiClient>> csi;
  for (int g = 0; g < 2; ++g) {
    ASSERT_TRUE(Eventually([&] { return fs::exists(stack.csi_socket(g)); }, 10s));
    csi.push_back(std::make_unique<CsiClient>(stack.csi_socket(g)));
  }
  auto target = [&](int g, const std::string& name) {
    const std::string dir = stack.target_root(g) + "/pods/" + name;
    fs::create_directories(dir);
    return dir + "/mount";
  };
  std::vector<WatchedVolume> watched;
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < kLongVolumesPerNode; ++i) {
      WatchedVolume v{.node = g,
                      .id = "csi-long-" + std::to_string(g) + "-" + std::to_string(i),
                      .target = target(g, "long-" + std::to_string(i))};
      grpc::Status st =
          csi[g]->Publish(TokenVolumeRequest(v.id, v.target, "vault", "600", "uid-long-" + v.id));
      ASSERT_TRUE(st.ok()) << v.id << ": " << st.error_message();
      v.last = fsutil::ReadFile(v.target + "/token").value_or("");
      ASSERT_TRUE(IsJwt(v.last)) << v.id;
      ledger.Add(v.last, "csi-publish", 0);
      watched.push_back(std::move(v));
    }
  }

  // The import.
  v1::CreateVolumeRequest create;
  create.mutable_spec()->set_name("faults-import");
  create.mutable_spec()->set_capacity_bytes(image_bytes);
  create.mutable_spec()->set_node("node-a");
  create.mutable_spec()->mutable_source()->mutable_http()->set_url(http.Url("/image.raw"));
  create.mutable_spec()->mutable_source()->set_sha256(image_sha);
  auto created = bus::Call<v1::CreateVolumeResponse>(client, subjects::kVolumeCreate, create, 10s);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string volume_id = created->volume().volume_id();
  const std::string disk = stack.volume_root() + "/" + volume_id + "/disk.img";
  const auto import_started = Clock::now();

  // ---- load ----
  std::vector<std::thread> load;
  Tally admission, issues, exchanges, publishes;

  // Admission as kube-apiserver sends it behind a Service: retried on no HTTP answer or
  // 429/5xx, up to 5 attempts, the next one on the other gateway.
  auto admit = [&](const std::string& webhook, const Json& object, int seq) {
    const std::string uid = webhook + "-" + std::to_string(seq);
    const std::string body = AdmissionReviewFor(object, uid);
    ++admission.ops;
    auto backoff = 500ms;
    std::string last_error;
    for (int attempt = 0; attempt < 5; ++attempt) {
      ++admission.attempts;
      auto resp =
          stack.Https("POST", "/" + webhook + "?timeout=10s", body, {}, 12s, (seq + attempt) % 2);
      const bool retry = !resp.ok() || resp->status == 429 || resp->status == 500 ||
                         resp->status == 502 || resp->status == 503 || resp->status == 504;
      if (retry) {
        last_error = resp.ok() ? "HTTP " + std::to_string(resp->status) + " " + resp->body
                               : resp.status().ToString();
        std::this_thread::sleep_for(backoff);
        backoff = std::chrono::duration_cast<std::chrono::milliseconds>(backoff * 1.5);
        continue;
      }
      auto j = Json::parse(resp->body, nullptr, false);
      if (resp->status != 200 || j.is_discarded() || !j.contains("response")) {
        admission.Fail(uid + ": HTTP " + std::to_string(resp->status) + " " + resp->body);
        return;
      }
      const Json& a = j["response"];
      if (a.value("uid", "") != uid) {
        admission.Fail(uid + ": answered for " + a.value("uid", ""));
      } else if (a.value("allowed", false) && (webhook != "mutate" || a.contains("patch"))) {
        ++admission.ok;
      } else if (!a.value("allowed", true) && a.contains("status") &&
                 a["status"].value("code", 0) == 500 &&
                 a["status"].value("message", "").rfind("wisp policy unavailable", 0) == 0) {
        ++admission.failure_mode;
      } else {
        admission.Fail(uid + ": " + a.dump());
      }
      return;
    }
    admission.Fail(uid + ": no answer in 5 attempts: " + last_error);
  };
  for (const char* webhook : {"mutate", "validate"}) {
    load.emplace_back([&, webhook] {
      const Json& object = std::string(webhook) == "mutate" ? pod : plain;
      for (int seq = 0; !stop; ++seq) {
        admit(webhook, object, seq);
        std::this_thread::sleep_for(40ms);
      }
    });
  }

  // Token issuance on the bus: each request retried by its caller for up to kRetryWindow.
  load.emplace_back([&] {
    for (int seq = 0; !stop; ++seq) {
      ++issues.ops;
      const auto begin = Clock::now();
      std::string last_error;
      bool answered = false;
      while (Clock::now() - begin < kRetryWindow) {
        ++issues.attempts;
        const int ph = phase;
        auto t = issue("issuer-" + std::to_string(seq % 16), "pod-" + std::to_string(seq), "vault");
        if (t.ok()) {
          ledger.Add(t->token(), "issue", ph);
          answered = true;
          break;
        }
        last_error = t.status().ToString();
        std::this_thread::sleep_for(100ms);
      }
      if (answered) {
        ++issues.ok;
      } else {
        issues.Fail("issue " + std::to_string(seq) + ": " + last_error);
      }
      std::this_thread::sleep_for(40ms);
    }
  });

  // RFC 8693 exchanges over HTTPS, alternating gateways, retried on no answer or 429/5xx.
  load.emplace_back([&] {
    for (int seq = 0; !stop; ++seq) {
      ++exchanges.ops;
      const auto begin = Clock::now();
      std::string last_error;
      bool answered = false;
      for (int attempt = 0; Clock::now() - begin < kRetryWindow; ++attempt) {
        ++exchanges.attempts;
        const int ph = phase;
        auto resp = stack.Https("POST", "/v1/token", exchange_forms[seq % kSubjects],
                                {{"Content-Type", "application/x-www-form-urlencoded"}}, 10s,
                                (seq + attempt) % 2);
        if (resp.ok() && resp->status == 200) {
          auto j = Json::parse(resp->body, nullptr, false);
          if (j.is_object() && j.contains("access_token")) {
            ledger.Add(j["access_token"].get<std::string>(), "sts", ph);
            answered = true;
          } else {
            last_error = "200 without access_token: " + resp->body;
          }
          break;
        }
        last_error = resp.ok() ? "HTTP " + std::to_string(resp->status) + " " + resp->body
                               : resp.status().ToString();
        if (resp.ok() && resp->status < 500 && resp->status != 429) break;  // a real refusal
        std::this_thread::sleep_for(200ms);
      }
      if (answered) {
        ++exchanges.ok;
      } else {
        exchanges.Fail("exchange " + std::to_string(seq) + ": " + last_error);
      }
      std::this_thread::sleep_for(100ms);
    }
  });

  // CSI churn on each node: publish (retried as the kubelet retries, for up to 30 s), read the
  // token, unpublish (retried the same way).
  auto kubelet = [&](const std::function<grpc::Status()>& call, std::string* error) {
    const auto begin = Clock::now();
    while (true) {
      ++publishes.attempts;
      grpc::Status st = call();
      if (st.ok()) return true;
      *error = std::to_string(st.error_code()) + " " + st.error_message();
      if (Clock::now() - begin > 30s) return false;
      std::this_thread::sleep_for(500ms);
    }
  };
  for (int g = 0; g < 2; ++g) {
    load.emplace_back([&, g] {
      for (int seq = 0; !stop; ++seq) {
        const std::string id = "csi-churn-" + std::to_string(g) + "-" + std::to_string(seq);
        const std::string t = target(g, "churn-" + std::to_string(seq));
        ++publishes.ops;
        std::string error;
        const int ph = phase;
        if (!kubelet(
                [&] {
                  return csi[g]->Publish(TokenVolumeRequest(id, t, "vault", "600", "uid-" + id));
                },
                &error)) {
          publishes.Fail(id + " publish: " + error);
          continue;
        }
        const std::string token = fsutil::ReadFile(t + "/token").value_or("");
        if (!IsJwt(token)) {
          publishes.Fail(id + ": no token after publish");
        } else {
          ledger.Add(token, "csi-publish", ph);
        }
        if (!kubelet([&] { return csi[g]->Unpublish(id, t); }, &error)) {
          publishes.Fail(id + " unpublish: " + error);
          continue;
        }
        ++publishes.ok;
        std::this_thread::sleep_for(200ms);
      }
    });
  }

  // The long-lived volumes' files, read as an application reads them, every 250 ms.
  std::mutex watched_mu;
  std::atomic<bool> last_fault_over{false};
  load.emplace_back([&] {
    while (!stop) {
      {
        std::lock_guard lock(watched_mu);
        for (auto& v : watched) {
          const std::string token = fsutil::ReadFile(v.target + "/token").value_or("");
          if (!IsJwt(token)) {
            ++v.bad_reads;
            continue;
          }
          if (token != v.last) {
            v.last = token;
            ++v.rotations;
            if (last_fault_over) ++v.rotations_after_last_fault;
            ledger.Add(token, "csi-rotation", phase);
          }
        }
      }
      std::this_thread::sleep_for(250ms);
    }
  });

  // The volume's status every 100 ms: SUCCEEDED may only be seen once disk.img is whole.
  std::atomic<int> polls{0}, early{0}, poll_errors{0};
  std::atomic<bool> succeeded{false};
  std::atomic<int64_t> succeeded_after_ms{0};
  std::atomic<int64_t> last_bytes_read{-1};
  std::mutex volume_mu;
  v1::VolumeStatus final_status;
  std::vector<std::string> phases_seen;
  std::thread poller([&] {
    while (!stop) {
      v1::GetVolumeRequest req;
      req.set_volume_id(volume_id);
      auto resp = bus::Call<v1::GetVolumeResponse>(client, subjects::kVolumeGet, req, 5s);
      if (!resp.ok()) {
        ++poll_errors;
      } else {
        ++polls;
        const v1::VolumeStatus& s = resp->volume();
        last_bytes_read = s.bytes_read();
        std::error_code ec;
        const auto size = fs::file_size(disk, ec);
        const bool whole = !ec && static_cast<int64_t>(size) == image_bytes;
        std::lock_guard lock(volume_mu);
        const std::string name = v1::VolumePhase_Name(s.phase());
        if (phases_seen.empty() || phases_seen.back() != name) phases_seen.push_back(name);
        if (s.phase() == v1::SUCCEEDED) {
          if (!whole) ++early;
          if (!succeeded) {
            succeeded_after_ms =
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - import_started)
                    .count();
          }
          succeeded = true;
          final_status = s;
        } else if (s.phase() == v1::FAILED) {
          final_status = s;
          return;
        }
      }
      std::this_thread::sleep_for(100ms);
    }
  });

  // ---- faults ----
  struct Event {
    double at;
    std::string what;
  };
  std::vector<Event> timeline;
  const auto t0 = Clock::now();
  auto note = [&](const std::string& what) {
    timeline.push_back({Since(t0), what});
    std::printf("[ faults   ] %6.1f s  %s\n", Since(t0), what.c_str());
    std::fflush(stdout);
  };
  // What the last poll saw, in MiB.
  auto bytes_read = [&] { return std::to_string(last_bytes_read.load() >> 20); };
  std::this_thread::sleep_for(kSettle);

  // F1: a node, and back.
  phase = 1;
  cluster.node(0).Kill();
  note("F1 SIGKILL NATS n0 (import at " + bytes_read() + " MiB)");
  std::this_thread::sleep_for(kDown);
  ASSERT_TRUE(cluster.node(0).Restart().ok());
  ASSERT_TRUE(cluster.node(0).process()->WaitForLog("JetStream cluster", 30s).ok());
  note("F1 n0 back");
  std::this_thread::sleep_for(kSettle);

  // F2: one replica of each service; the populator is the one importing.
  phase = 2;
  std::string importing;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const std::string p : {"wisp-populator", "wisp-populator.1"}) {
          if (HasOpen(stack.process(p).pid(), volume_id)) importing = p;
        }
        return !importing.empty();
      },
      20s, 100ms))
      << "no populator has the import's file open; the volume was at " << bytes_read()
      << " MiB, phases seen: " << [&] {
           std::lock_guard lock(volume_mu);
           std::string out;
           for (const auto& p : phases_seen) out += p + " ";
           return out;
         }();
  const std::vector<std::string> victims = {"wisp-token.1", "wisp-policy.1", "wisp-gateway.1",
                                            importing};
  for (const auto& v : victims) stack.Kill(v);
  note("F2 SIGKILL wisp-token.1, wisp-policy.1, wisp-gateway.1 (node-b's CSI) and " + importing +
       " (importing, at " + bytes_read() + " MiB)");
  std::this_thread::sleep_for(kDown);
  for (const auto& v : victims) ASSERT_TRUE(stack.StartService(v).ok()) << v;
  for (const auto& v : victims) ASSERT_TRUE(stack.WaitReady(v, 60s).ok()) << v;
  note("F2 replicas back");
  std::this_thread::sleep_for(kSettle);

  // F3: the node leading WISP_POPULATE.
  phase = 3;
  int leader = -1;
  ASSERT_TRUE(Eventually(
      [&] {
        leader = StreamLeader(cluster, std::string(bus::streams::kPopulateJobs));
        return leader >= 0;
      },
      20s, 200ms));
  cluster.node(leader).Kill();
  note("F3 SIGKILL NATS n" + std::to_string(leader) + ", leader of WISP_POPULATE (import at " +
       bytes_read() + " MiB)");
  std::this_thread::sleep_for(kDown);
  ASSERT_TRUE(cluster.node(leader).Restart().ok());
  ASSERT_TRUE(cluster.node(leader).process()->WaitForLog("JetStream cluster", 30s).ok());
  const int new_leader = StreamLeader(cluster, std::string(bus::streams::kPopulateJobs));
  note("F3 n" + std::to_string(leader) + " back; WISP_POPULATE led by n" +
       std::to_string(new_leader));
  last_fault_over = true;

  // Load goes on until the import is done and every long-lived volume rotated again.
  const bool finished = Eventually(
      [&] {
        if (!succeeded) return false;
        std::lock_guard lock(watched_mu);
        for (const auto& v : watched) {
          if (v.rotations_after_last_fault == 0) return false;
        }
        return true;
      },
      std::chrono::seconds(180 + 2 * kImportSeconds), 200ms);
  note(std::string("load stopped") + (finished ? "" : " (timed out waiting for the import)"));
  stop = true;
  for (auto& t : load) t.join();
  poller.join();

  // ---- figures ----
  const std::string disk_sha = Sha256sum(disk);
  std::set<std::string> kids_after[2] = {jwks_kids(0), jwks_kids(1)};
  std::string jwks_json;
  {
    auto resp = stack.Https("GET", "/openid/v1/jwks", "", {}, 5s, 1);
    ASSERT_TRUE(resp.ok() && resp->status == 200);
    jwks_json = resp->body;
  }
  auto keys = jwt::KeySet::FromJwks(jwks_json);
  ASSERT_TRUE(keys.ok()) << keys.status();
  const int64_t now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  const std::string issuer = "https://localhost:" + std::to_string(stack.gateway_port(0));
  int unverified = 0, before_first_loss = 0;
  std::map<std::string, int> by_source;
  std::string first_unverified;
  for (const auto& [token, entry] : ledger.tokens()) {
    by_source[entry.source]++;
    if (entry.phase == 0) ++before_first_loss;
    auto v = jwt::Verify(token, *keys, {.issuer = issuer, .now_unix = now_unix});
    if (!v.ok()) {
      if (++unverified == 1) first_unverified = entry.source + ": " + v.status().ToString();
    }
  }
  int keys_lost = 0;
  for (const auto& kid : kids_before) {
    keys_lost += !kids_after[0].count(kid) || !kids_after[1].count(kid);
  }
  int rotations = 0, min_rotations = 1 << 30, min_after = 1 << 30, bad_reads = 0;
  for (const auto& v : watched) {
    rotations += v.rotations;
    min_rotations = std::min(min_rotations, v.rotations);
    min_after = std::min(min_after, v.rotations_after_last_fault);
    bad_reads += v.bad_reads;
  }
  std::string sources;
  for (const auto& [s, n] : by_source)
    sources += (sources.empty() ? "" : ", ") + s + " " + std::to_string(n);

  std::printf(
      "[ figure   ] admission: %d reviews (/mutate + /validate over HTTPS, both gateways), %d "
      "attempts (%d retried), %d answered by the failure mode (closed), %d failed beyond it\n",
      admission.ops.load(), admission.attempts.load(),
      admission.attempts.load() - admission.ops.load(), admission.failure_mode.load(),
      admission.failed.load());
  std::printf(
      "[ figure   ] token issue (bus): %d requests, %d attempts, %d answered, %d unanswered\n",
      issues.ops.load(), issues.attempts.load(), issues.ok.load(), issues.failed.load());
  std::printf(
      "[ figure   ] sts exchange (HTTPS): %d requests, %d attempts, %d answered, %d unanswered\n",
      exchanges.ops.load(), exchanges.attempts.load(), exchanges.ok.load(),
      exchanges.failed.load());
  std::printf(
      "[ figure   ] tokens: %zu distinct (%s), %d duplicated jti, %d without jti, %d "
      "malformed\n",
      ledger.tokens().size(), sources.c_str(), ledger.duplicated(), ledger.no_jti(),
      ledger.malformed());
  std::printf(
      "[ figure   ] keys: %d of %zu tokens (%d signed before the first loss) fail to verify "
      "against the JWKS served after the last fault; %d of %zu keys published before lost\n",
      unverified, ledger.tokens().size(), before_first_loss, keys_lost, kids_before.size());
  std::printf(
      "[ figure   ] csi: %d publish+unpublish cycles (%d calls), %d failed; %zu long-lived "
      "volumes rotated %d times (each at least %d, at least %d after the last fault), %d torn "
      "or unreadable reads\n",
      publishes.ops.load(), publishes.attempts.load(), publishes.failed.load(), watched.size(),
      rotations, min_rotations, min_after, bad_reads);
  {
    std::lock_guard lock(volume_mu);
    std::string seen;
    for (const auto& p : phases_seen) seen += (seen.empty() ? "" : " > ") + p;
    std::string ranges;
    for (const auto& range : http.RangeRequests()) {
      if (!range.empty()) ranges += (ranges.empty() ? " resumed at " : ", ") + range;
    }
    std::printf(
        "[ figure   ] import: %lld bytes, %s in %.1f s (%d attempts, %d requests%s), sha256 %s, "
        "%d status polls (%s; %d unanswered), %d saw SUCCEEDED before disk.img was whole\n",
        static_cast<long long>(image_bytes), v1::VolumePhase_Name(final_status.phase()).c_str(),
        succeeded_after_ms.load() / 1000.0, final_status.attempts(), http.requests(),
        ranges.c_str(), disk_sha == image_sha ? "matches" : ("MISMATCH " + disk_sha).c_str(),
        polls.load(), seen.c_str(), poll_errors.load(), early.load());
  }
  for (const auto& e : timeline) RecordProperty("t" + std::to_string(int(e.at)), e.what);
  RecordProperty("admission_failure_mode", admission.failure_mode.load());
  RecordProperty("admission_failed", admission.failed.load());
  RecordProperty("tokens", static_cast<int>(ledger.tokens().size()));
  RecordProperty("import_seconds", static_cast<int>(succeeded_after_ms.load() / 1000));

  // ---- assertions ----
  EXPECT_TRUE(finished);
  EXPECT_EQ(admission.failed.load(), 0) << admission.FirstFailures();
  EXPECT_GT(admission.ok.load(), 0);
  EXPECT_EQ(issues.failed.load(), 0) << issues.FirstFailures();
  EXPECT_EQ(exchanges.failed.load(), 0) << exchanges.FirstFailures();
  EXPECT_GT(exchanges.ok.load(), 0);
  EXPECT_EQ(ledger.duplicated(), 0);
  EXPECT_EQ(ledger.no_jti(), 0);
  EXPECT_EQ(ledger.malformed(), 0);
  EXPECT_EQ(unverified, 0) << first_unverified;
  EXPECT_GT(before_first_loss, 0);
  EXPECT_EQ(keys_lost, 0);
  EXPECT_EQ(publishes.failed.load(), 0) << publishes.FirstFailures();
  EXPECT_EQ(bad_reads, 0);
  EXPECT_GE(min_after, 1) << "a long-lived token volume stopped rotating";
  EXPECT_EQ(final_status.phase(), v1::SUCCEEDED) << final_status.message();
  EXPECT_EQ(disk_sha, image_sha);
  EXPECT_EQ(final_status.sha256(), image_sha);
  EXPECT_EQ(early.load(), 0);
  EXPECT_GT(polls.load(), 100);

  for (auto& v : watched) EXPECT_TRUE(csi[v.node]->Unpublish(v.id, v.target).ok()) << v.id;
}

}  // namespace
}  // namespace wisp::integration
