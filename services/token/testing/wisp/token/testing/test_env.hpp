#pragma once
// A wisp-token stack over InMemoryBus and FakeClock for the unit tests.
#include <memory>

#include <prometheus/registry.h>

#include "exchanger.hpp"
#include "issuer.hpp"
#include "key_manager.hpp"
#include "metrics.hpp"
#include "policy.hpp"
#include "reviewer.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::token::testing {

inline constexpr const char* kIssuer = "https://wisp.test";

inline constexpr const char* kPolicyYaml = R"(
maxExpirationSeconds: 7200
defaultAudiences: [wisp]
namespaces:
  ml:
    audiences: [vault, sts.amazonaws.com, wisp-sts]
  short:
    audiences: [vault]
    maxExpirationSeconds: 900
exchange:
  accessTokenLifetimeSeconds: 1800
  subjectAudiences: [wisp-sts]
  rules:
    - namespace: ml
      serviceAccounts: [loader]
      audiences: [storage.wisp.dev, "https://storage.wisp.dev/v1"]
      scopes: [https://www.googleapis.com/auth/cloud-platform]
)";

struct Env {
  explicit Env(const char* policy_yaml = kPolicyYaml)
      : bus(clock), metrics(registry), policy(*Policy::FromYaml(policy_yaml)) {
    kv = *bus.OpenBucket({.name = std::string(bus::buckets::kKeys)});
    keys = std::make_unique<KeyManager>(
        *kv, kek, clock,
        KeyManager::Options{.rotation_period = std::chrono::hours(24),
                            .longest_token = std::chrono::seconds(policy.LongestTokenSeconds())},
        &metrics);
    issuer = std::make_unique<Issuer>(*keys, policy, clock, metrics, Issuer::Options{kIssuer});
    reviewer = std::make_unique<Reviewer>(*keys, clock, metrics,
                                          Reviewer::Options{kIssuer, std::chrono::seconds(30)});
    exchanger = std::make_unique<Exchanger>(*reviewer, *issuer, policy, clock, metrics);
  }

  v1::IssueRequest Request(std::string ns = "ml", std::string sa = "loader",
                           std::vector<std::string> auds = {"vault"}) {
    v1::IssueRequest r;
    r.mutable_subject()->set_namespace_(ns);
    r.mutable_subject()->set_service_account(sa);
    r.mutable_subject()->set_service_account_uid("sa-uid");
    r.mutable_subject()->set_pod_name("loader-0");
    r.mutable_subject()->set_pod_uid("pod-uid");
    for (auto& a : auds) r.add_audiences(a);
    return r;
  }

  FakeClock clock;
  bus::testing::InMemoryBus bus;
  prometheus::Registry registry;
  TokenMetrics metrics;
  Policy policy;
  jwt::Kek kek = jwt::Kek::Random();
  bus::KeyValuePtr kv;
  std::unique_ptr<KeyManager> keys;
  std::unique_ptr<Issuer> issuer;
  std::unique_ptr<Reviewer> reviewer;
  std::unique_ptr<Exchanger> exchanger;
};

}  // namespace wisp::token::testing
