#include "admission/admission_handler.hpp"

#include <absl/strings/escaping.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "wisp/policy/policy_service.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::gateway::admission {
namespace {

using k8s::Json;

constexpr const char* kPod = R"({"apiVersion":"v1","kind":"Pod",
  "metadata":{"name":"loader","namespace":"ml","annotations":{"wisp.dev/token-sidecar":"true"}},
  "spec":{"hostNetwork":true,"serviceAccountName":"loader",
          "containers":[{"name":"main","image":"loader:1"}]}})";

std::string Review(const std::string& group, const std::string& kind, const std::string& object,
                   const std::string& uid = "3f2a-uid") {
  Json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"},
                 {"request",
                  {{"uid", uid},
                   {"kind", {{"group", group}, {"version", "v1"}, {"kind", kind}}},
                   {"operation", "CREATE"},
                   {"namespace", "ml"},
                   {"name", "x"},
                   {"object", Json::parse(object)}}}};
  return review.dump();
}

http::Request Post(std::string body, std::string query = "timeout=10s",
                   std::string content_type = "application/json") {
  http::Request r;
  r.method = "POST";
  r.path = "/mutate";
  r.query = std::move(query);
  r.target = r.path + "?" + r.query;
  r.headers["content-type"] = std::move(content_type);
  r.body = std::move(body);
  return r;
}

class AdmissionHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sources_ = *bus_.OpenBucket({.name = std::string(bus::buckets::kSources)});
    policy_ = std::make_unique<policy::PolicyService>(*sources_, policy::Policy{}, clock_,
                                                      policy_metrics_);
    micro_ = *bus::Service::Start(bus_, {.name = "wisp-policy", .version = "0.1.0"});
    ASSERT_TRUE(policy_->AddEndpoints(*micro_).ok());
  }

  AdmissionHandler Handler(FailureMode mode = FailureMode::kClosed) {
    return AdmissionHandler(bus_, registry_, {.failure_mode = mode, .kubernetes_version = "1.30"});
  }

  double Count(const std::string& outcome) {
    double total = 0;
    for (const auto& family : registry_.Collect()) {
      if (family.name != "wisp_gateway_admission_requests_total") continue;
      for (const auto& m : family.metric) {
        for (const auto& l : m.label) {
          if (l.name == "outcome" && l.value == outcome) total += m.counter.value;
        }
      }
    }
    return total;
  }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  prometheus::Registry registry_;
  prometheus::Registry policy_registry_;
  policy::PolicyMetrics policy_metrics_{policy_registry_};
  bus::KeyValuePtr sources_;
  std::unique_ptr<policy::PolicyService> policy_;
  std::unique_ptr<bus::Service> micro_;
};

// Tests that a mutation answers an AdmissionReview echoing uid and apiVersion with a base64
// JSONPatch that, applied, yields the injected pod.
TEST_F(AdmissionHandlerTest, MutateAnswersWithPatch) {
  auto handler = Handler();
  http::Response resp = handler.Mutate(Post(Review("", "Pod", kPod)));
  ASSERT_EQ(resp.status, 200) << resp.body;
  Json out = Json::parse(resp.body);
  EXPECT_EQ(out["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(out["kind"], "AdmissionReview");
  EXPECT_EQ(out["response"]["uid"], "3f2a-uid");
  EXPECT_EQ(out["response"]["allowed"], true);
  EXPECT_EQ(out["response"]["patchType"], "JSONPatch");
  std::string patch;
  ASSERT_TRUE(absl::Base64Unescape(out["response"]["patch"].get<std::string>(), &patch));
  Json mutated = Json::parse(kPod).patch(Json::parse(patch));
  EXPECT_EQ(mutated["spec"]["initContainers"][0]["name"], "wisp-sidecar");  // 1.30: native
  EXPECT_EQ(out["response"]["auditAnnotations"]["token-sidecar"], "wisp-sidecar (native sidecar)");
  EXPECT_EQ(Count("allowed"), 1);
}

// Tests that a denial carries status code and message.
TEST_F(AdmissionHandlerTest, ValidateDenies) {
  auto handler = Handler();
  const std::string vmi = R"({"metadata":{"name":"vm","namespace":"ml"},"spec":{
    "domain":{"devices":{"filesystems":[{"name":"t","virtiofs":{}}]}},
    "volumes":[{"name":"t","serviceAccount":{"serviceAccountName":"sa",
      "serviceAccountToken":{"expirationSeconds":300,"path":"token"}}}]}})";
  http::Response resp =
      handler.Validate(Post(Review("kubevirt.io", "VirtualMachineInstance", vmi)));
  ASSERT_EQ(resp.status, 200) << resp.body;
  Json out = Json::parse(resp.body);
  EXPECT_EQ(out["response"]["allowed"], false);
  EXPECT_EQ(out["response"]["status"]["code"], 422);
  EXPECT_EQ(out["response"]["status"]["message"],
            "spec.volumes[0].serviceAccount.serviceAccountToken.expirationSeconds: Invalid value: "
            "300: may not specify a duration less than 10 minutes");
  EXPECT_FALSE(out["response"].contains("patch"));
  EXPECT_EQ(Count("denied"), 1);
}

// Tests that malformed requests get 400 (or 413) naming the problem.
TEST_F(AdmissionHandlerTest, BadRequestsNameTheProblem) {
  auto handler = Handler();
  struct Case {
    http::Request request;
    int status;
    std::string error;
  } cases[] = {
      {Post(Review("", "Pod", kPod), "", "text/plain"), 400,
       "Content-Type \"text/plain\" is not application/json"},
      {Post("{not json", ""), 400, ""},
      {Post(R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})", ""), 400,
       "request is missing"},
      {Post(Review("apps", "Deployment", "{}"), ""), 400,
       "request.kind \"apps/v1, Kind=Deployment\" is not admitted by wisp (v1 Pod, v1 "
       "PersistentVolumeClaim, kubevirt.io VirtualMachineInstance, cdi.kubevirt.io DataVolume, "
       "wisp.dev VolumeImportSource)"},
      {Post(Review("", "Pod", kPod), "timeout=soon"), 400,
       "timeout \"soon\" is not a positive duration"},
      {Post(std::string(3 * 1024 * 1024 + 1, ' '), ""), 413,
       "request body of 3145729 bytes exceeds 3145728 bytes"},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.request.body.substr(0, 60));
    http::Response resp = handler.Mutate(c.request);
    EXPECT_EQ(resp.status, c.status);
    Json body = Json::parse(resp.body);
    if (!c.error.empty()) {
      EXPECT_EQ(body["error"], c.error);
    } else {
      EXPECT_EQ(body["error"].get<std::string>().rfind("body is not valid JSON", 0), 0u)
          << resp.body;
    }
  }
  EXPECT_EQ(Count("error"), 6);
  // application/json with parameters is fine.
  EXPECT_EQ(
      handler.Mutate(Post(Review("", "Pod", kPod), "", "application/json; charset=utf-8")).status,
      200);
}

// Tests both failure modes when the policy service is down or too slow.
TEST_F(AdmissionHandlerTest, FailureModes) {
  bus_.FailSubject(bus::subjects::kPolicyMutate, absl::UnavailableError("no responders"));
  auto closed = Handler(FailureMode::kClosed);
  Json c = Json::parse(closed.Mutate(Post(Review("", "Pod", kPod))).body);
  EXPECT_EQ(c["response"]["uid"], "3f2a-uid");
  EXPECT_EQ(c["response"]["allowed"], false);
  EXPECT_EQ(c["response"]["status"]["code"], 500);
  EXPECT_EQ(c["response"]["status"]["message"],
            "wisp policy unavailable: UNAVAILABLE: no responders");
  EXPECT_EQ(Count("fail_closed"), 1);

  bus_.DropReplies(bus::subjects::kPolicyValidate);
  auto open = Handler(FailureMode::kOpen);
  Json o = Json::parse(open.Validate(Post(Review("", "Pod", kPod), "timeout=2s")).body);
  EXPECT_EQ(o["response"]["allowed"], true);
  ASSERT_EQ(o["response"]["warnings"].size(), 1u);
  EXPECT_EQ(o["response"]["warnings"][0].get<std::string>().rfind(
                "wisp policy unavailable: DEADLINE_EXCEEDED", 0),
            0u)
      << o.dump();
  EXPECT_FALSE(o["response"].contains("patch"));
  EXPECT_EQ(Count("fail_open"), 1);
  EXPECT_TRUE(ParseFailureMode("open").ok());
  EXPECT_EQ(std::string(ParseFailureMode("maybe").status().message()),
            "failure-mode: \"maybe\" is not one of closed, open");
}

// A ServiceAccountSource with set answers: cached ones, and one a Fetch gives from another
// thread (as the gateway's cache does for a live GET).
class StubAccounts final : public ServiceAccountSource {
 public:
  std::map<std::string, ServiceAccountAnswer> cached;  // "<ns>/<name>"
  ServiceAccountAnswer fetched = ServiceAccountAnswer::NotFound();
  std::vector<std::string> asked;    // Cached()
  std::vector<std::string> fetches;  // Fetch()

  std::optional<ServiceAccountAnswer> Cached(std::string_view ns, std::string_view name) override {
    const std::string key = std::string(ns) + "/" + std::string(name);
    asked.push_back(key);
    auto it = cached.find(key);
    if (it == cached.end()) return std::nullopt;
    return it->second;
  }
  void Fetch(std::string_view ns, std::string_view name,
             std::function<void(ServiceAccountAnswer)> done) override {
    fetches.push_back(std::string(ns) + "/" + std::string(name));
    std::thread([answer = fetched, done = std::move(done)] { done(answer); }).detach();
  }
};

ServiceAccountAnswer FoundWith(std::map<std::string, std::string> annotations) {
  return ServiceAccountAnswer::Found(
      std::make_shared<const std::map<std::string, std::string>>(std::move(annotations)));
}

// wisp-policy as a test double: keeps the calls it is sent and allows each.
class AdmissionServiceAccountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto subject : {bus::subjects::kPolicyMutate, bus::subjects::kPolicyValidate}) {
      subs_.push_back(*bus_.Serve(subject, "wisp-policy", [this](const bus::Request& r) {
        auto call = bus::ParseBody<v1::AdmissionCall>(r);
        if (!call.ok()) return bus::Reply::Error(call.status());
        std::lock_guard lock(mu_);
        calls_.push_back(*call);
        v1::AdmissionVerdict verdict;
        verdict.set_allowed(true);
        verdict.add_warnings("policy's own warning");
        return bus::ProtoReply(verdict);
      }));
    }
  }
  AdmissionHandler Handler(FailureMode sa_mode = FailureMode::kOpen) {
    return AdmissionHandler(bus_, registry_,
                            {.failure_mode = FailureMode::kClosed,
                             .kubernetes_version = "1.30",
                             .service_accounts = &accounts_,
                             .service_account_failure_mode = sa_mode});
  }
  std::vector<v1::AdmissionCall> Calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  prometheus::Registry registry_;
  StubAccounts accounts_;
  std::mutex mu_;
  std::vector<v1::AdmissionCall> calls_;
  std::vector<bus::SubscriptionPtr> subs_;
};

// Tests that a pod CREATE carries its ServiceAccount's annotations from the cache, on both
// webhooks, without a fetch.
TEST_F(AdmissionServiceAccountTest, PodCarriesItsServiceAccountsAnnotationsFromTheCache) {
  accounts_.cached["ml/loader"] = FoundWith({{"eks.amazonaws.com/role-arn", "arn:loader"}});
  auto handler = Handler();
  for (bool mutate : {true, false}) {
    http::Response resp = handler.Handle(Post(Review("", "Pod", kPod)), mutate);
    ASSERT_EQ(resp.status, 200) << resp.body;
  }
  auto calls = Calls();
  ASSERT_EQ(calls.size(), 2u);
  for (const auto& call : calls) {
    EXPECT_TRUE(call.service_account_found());
    EXPECT_EQ(call.service_account_annotations().at("eks.amazonaws.com/role-arn"), "arn:loader");
  }
  EXPECT_TRUE(accounts_.fetches.empty());
}

// Tests the cache miss: the lookup continues on the fetch's thread and the call carries what
// the apiserver answered; a pod without serviceAccountName is looked up as "default".
TEST_F(AdmissionServiceAccountTest, CacheMissIsFetchedAndDefaultIsTheDefault) {
  accounts_.fetched = FoundWith({{"azure.workload.identity/client-id", "c1"}});
  auto handler = Handler();
  const std::string pod = R"({"metadata":{"name":"p","namespace":"ml"},
    "spec":{"containers":[{"name":"main","image":"app:1"}]}})";
  Json out = Json::parse(handler.Mutate(Post(Review("", "Pod", pod))).body);
  EXPECT_EQ(out["response"]["allowed"], true) << out.dump();
  EXPECT_EQ(accounts_.fetches, std::vector<std::string>{"ml/default"});
  auto calls = Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].service_account_found());
  EXPECT_EQ(calls[0].service_account_annotations().at("azure.workload.identity/client-id"), "c1");
}

// Tests that a ServiceAccount that does not exist sends found=false, and that other kinds are not
// looked up at all.
TEST_F(AdmissionServiceAccountTest, MissingServiceAccountAndOtherKinds) {
  accounts_.cached["ml/loader"] = ServiceAccountAnswer::NotFound();
  auto handler = Handler();
  ASSERT_EQ(handler.Mutate(Post(Review("", "Pod", kPod))).status, 200);
  const std::string pvc = R"({"metadata":{"name":"c","namespace":"ml"},"spec":{}})";
  ASSERT_EQ(handler.Validate(Post(Review("", "PersistentVolumeClaim", pvc))).status, 200);
  auto calls = Calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[0].service_account_found());
  EXPECT_TRUE(calls[0].service_account_annotations().empty());
  EXPECT_FALSE(calls[1].service_account_found());
  EXPECT_EQ(accounts_.asked, std::vector<std::string>{"ml/loader"});
}

// Tests both answers to a ServiceAccount that cannot be read: open admits through the policy
// with a warning first; closed refuses with code 500 and never calls the policy.
TEST_F(AdmissionServiceAccountTest, UnreadableServiceAccountFollowsItsFailureMode) {
  accounts_.fetched = ServiceAccountAnswer::Error("get serviceaccounts ml/loader: timed out");
  {
    auto open = Handler(FailureMode::kOpen);
    Json o = Json::parse(open.Mutate(Post(Review("", "Pod", kPod))).body);
    EXPECT_EQ(o["response"]["allowed"], true);
    ASSERT_EQ(o["response"]["warnings"].size(), 2u) << o.dump();
    EXPECT_EQ(o["response"]["warnings"][0],
              "wisp: ServiceAccount ml/loader could not be read (get serviceaccounts ml/loader: "
              "timed out); the pod is admitted as it asks, without identity chosen by its "
              "ServiceAccount's annotations");
    EXPECT_EQ(o["response"]["warnings"][1], "policy's own warning");
    ASSERT_EQ(Calls().size(), 1u);
    EXPECT_FALSE(Calls()[0].service_account_found());
  }
  {
    auto closed = Handler(FailureMode::kClosed);
    Json c = Json::parse(closed.Mutate(Post(Review("", "Pod", kPod))).body);
    EXPECT_EQ(c["response"]["allowed"], false);
    EXPECT_EQ(c["response"]["uid"], "3f2a-uid");
    EXPECT_EQ(c["response"]["status"]["code"], 500);
    EXPECT_EQ(c["response"]["status"]["message"],
              "wisp: ServiceAccount ml/loader could not be read: get serviceaccounts ml/loader: "
              "timed out");
    EXPECT_EQ(Calls().size(), 1u);  // the policy was not asked
  }
}

// Tests that the AdmissionCall carries everything the policy needs.
TEST(ToAdmissionCallTest, CopiesFields) {
  auto review = k8s::ParseAdmissionReview(R"({"apiVersion":"admission.k8s.io/v1",
    "kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},
    "resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE",
    "namespace":"ns","name":"n","userInfo":{"username":"me","groups":["g"]},
    "object":{"a":1},"dryRun":true}})");
  ASSERT_TRUE(review.ok());
  v1::AdmissionCall call = ToAdmissionCall(review->request, "1.31");
  EXPECT_EQ(call.uid(), "u");
  EXPECT_EQ(call.kind().kind(), "Pod");
  EXPECT_EQ(call.resource().kind(), "pods");
  EXPECT_EQ(call.user().groups(0), "g");
  EXPECT_EQ(call.object_json(), R"({"a":1})");
  EXPECT_TRUE(call.old_object_json().empty());
  EXPECT_TRUE(call.dry_run());
  EXPECT_EQ(call.server_version(), "1.31");
}

}  // namespace
}  // namespace wisp::gateway::admission
