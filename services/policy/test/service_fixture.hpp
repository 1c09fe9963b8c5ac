#pragma once
// PolicyService over an InMemoryBus with its wisp_sources bucket and endpoints, for the service
// tests (policy_service_test.cpp, committed_test.cpp).
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/policy/policy_service.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::policy::testing {

class PolicyServiceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    sources_ = *bus_.OpenBucket({.name = std::string(bus::buckets::kSources)});
    service_ = std::make_unique<PolicyService>(*sources_, Policy{}, clock_, metrics_);
    micro_ = *bus::Service::Start(bus_, {.name = "wisp-policy", .version = "0.1.0"});
    ASSERT_TRUE(service_->AddEndpoints(*micro_).ok());
  }

  v1::AdmissionCall Call(const std::string& group, const std::string& kind, const char* json,
                         bool dry_run = false) {
    v1::AdmissionCall call;
    call.set_uid("u1");
    call.mutable_kind()->set_group(group);
    call.mutable_kind()->set_version("v1");
    call.mutable_kind()->set_kind(kind);
    call.set_operation("CREATE");
    call.set_namespace_("vms");
    call.set_name("s3-vm");
    call.set_object_json(json);
    call.set_dry_run(dry_run);
    return call;
  }

  double Decisions(const std::string& rule, const std::string& outcome) {
    for (const auto& m : metrics_.decisions.Collect()) {
      for (const auto& metric : m.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : metric.label) labels[l.name] = l.value;
        if (labels["rule"] == rule && labels["outcome"] == outcome) return metric.counter.value;
      }
    }
    return 0;
  }

  // A committed object sent to wisp.v1.policy.record, as the gateway's watch sends it.
  absl::StatusOr<v1::CommitResult> Send(const v1::CommittedObject& o) {
    return bus::Call<v1::CommitResult>(bus_, bus::subjects::kPolicyRecord, o,
                                       std::chrono::seconds(1));
  }
  bool Has(const std::string& key) { return sources_->Get(key).ok(); }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  prometheus::Registry registry_;
  PolicyMetrics metrics_{registry_};
  bus::KeyValuePtr sources_;
  std::unique_ptr<PolicyService> service_;
  std::unique_ptr<bus::Service> micro_;
};

}  // namespace wisp::policy::testing
