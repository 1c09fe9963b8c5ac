#include "wisp/bus/service.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"

namespace wisp::bus {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto svc = Service::Start(bus_, ServiceConfig{.name = "wisp-token",
                                                  .version = "0.1.0",
                                                  .description = "tokens",
                                                  .metadata = {{"node", "n1"}},
                                                  .registry = &registry_});
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = *std::move(svc);
    ASSERT_TRUE(svc_->AddEndpoint("issue", subjects::kTokenIssue, queues::kToken,
                                  [](const Request& r) {
                                    if (r.msg.data == "bad") {
                                      return Reply::Error(absl::InvalidArgumentError("bad body"));
                                    }
                                    return Reply::Ok("token");
                                  })
                    .ok());
  }

  double CounterValue(const std::string& code) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != "wisp_bus_requests_total") continue;
      for (const auto& m : family.metric) {
        bool match = false;
        for (const auto& l : m.label) match |= (l.name == "code" && l.value == code);
        if (match) return m.counter.value;
      }
    }
    return -1;
  }

  prometheus::Registry registry_;
  testing::InMemoryBus bus_;
  std::unique_ptr<Service> svc_;
};

// Tests that PING answers on all three subject forms with the ADR-32 shape.
TEST_F(ServiceTest, PingOnAllSubjects) {
  for (const std::string& subject : {std::string("$SRV.PING"), std::string("$SRV.PING.wisp-token"),
                                     "$SRV.PING.wisp-token." + svc_->id()}) {
    SCOPED_TRACE(subject);
    auto reply = bus_.Request(subject, "", 1s);
    ASSERT_TRUE(reply.ok()) << reply.status();
    json j = json::parse(reply->data);
    EXPECT_EQ(j["type"], "io.nats.micro.v1.ping_response");
    EXPECT_EQ(j["name"], "wisp-token");
    EXPECT_EQ(j["id"], svc_->id());
    EXPECT_EQ(j["version"], "0.1.0");
    EXPECT_EQ(j["metadata"]["node"], "n1");
  }
  EXPECT_EQ(bus_.Request("$SRV.PING.other", "", 1s).status().code(),
            absl::StatusCode::kUnavailable);
}

// Tests that INFO lists endpoints with subject and queue group.
TEST_F(ServiceTest, InfoListsEndpoints) {
  auto reply = bus_.Request("$SRV.INFO.wisp-token", "", 1s);
  ASSERT_TRUE(reply.ok());
  json j = json::parse(reply->data);
  EXPECT_EQ(j["type"], "io.nats.micro.v1.info_response");
  EXPECT_EQ(j["description"], "tokens");
  ASSERT_EQ(j["endpoints"].size(), 1u);
  EXPECT_EQ(j["endpoints"][0]["name"], "issue");
  EXPECT_EQ(j["endpoints"][0]["subject"], "wisp.v1.token.issue");
  EXPECT_EQ(j["endpoints"][0]["queue_group"], "wisp-token");
}

// Tests that STATS counts requests and errors and metrics are exported by code.
TEST_F(ServiceTest, StatsAndMetricsCountRequests) {
  ASSERT_TRUE(bus_.Request(subjects::kTokenIssue, "ok", 1s).ok());
  ASSERT_TRUE(bus_.Request(subjects::kTokenIssue, "ok", 1s).ok());
  EXPECT_EQ(bus_.Request(subjects::kTokenIssue, "bad", 1s).status().code(),
            absl::StatusCode::kInvalidArgument);
  json j = json::parse(svc_->StatsJson());
  EXPECT_EQ(j["type"], "io.nats.micro.v1.stats_response");
  EXPECT_THAT(j["started"].get<std::string>(),
              ::testing::MatchesRegex("[0-9]+-[0-9]+-[0-9]+T[0-9:]+[.][0-9]+Z"));
  const auto& ep = j["endpoints"][0];
  EXPECT_EQ(ep["num_requests"], 3);
  EXPECT_EQ(ep["num_errors"], 1);
  EXPECT_EQ(ep["last_error"], "INVALID_ARGUMENT: bad body");
  EXPECT_GE(ep["processing_time"].get<int64_t>(), 0);
  EXPECT_EQ(CounterValue("OK"), 2);
  EXPECT_EQ(CounterValue("INVALID_ARGUMENT"), 1);
}

// Tests that Discover merges PING, INFO and STATS of every instance.
TEST_F(ServiceTest, DiscoverFindsEveryInstance) {
  auto second = Service::Start(bus_, ServiceConfig{.name = "wisp-policy", .version = "1.2.3-rc.1"});
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(bus_.Request(subjects::kTokenIssue, "ok", 1s).ok());
  auto all = Discover(bus_, 200ms);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "wisp-policy");
  EXPECT_EQ((*all)[0].version, "1.2.3-rc.1");
  const auto& token = (*all)[1];
  EXPECT_EQ(token.name, "wisp-token");
  EXPECT_EQ(token.id, svc_->id());
  EXPECT_TRUE(token.answered_info);
  EXPECT_TRUE(token.answered_stats);
  EXPECT_FALSE(token.started.empty());
  ASSERT_EQ(token.endpoints.size(), 1u);
  EXPECT_EQ(token.endpoints[0].num_requests, 1u);
  auto only = Discover(bus_, 200ms, "wisp-policy");
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->size(), 1u);
  EXPECT_EQ((*only)[0].name, "wisp-policy");
}

// Tests that bad names and versions are rejected naming the field.
TEST_F(ServiceTest, RejectsBadConfig) {
  auto bad_name = Service::Start(bus_, ServiceConfig{.name = "bad name", .version = "1.0.0"});
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_name.status().message()), ::testing::HasSubstr("service name"));
  auto bad_version = Service::Start(bus_, ServiceConfig{.name = "ok", .version = "v1"});
  EXPECT_THAT(std::string(bad_version.status().message()), ::testing::HasSubstr("version"));
  EXPECT_EQ(
      svc_->AddEndpoint("bad.name", "x", "", [](const Request&) { return Reply::Ok(""); }).code(),
      absl::StatusCode::kInvalidArgument);
}

// Tests that a drained service stops answering.
TEST_F(ServiceTest, DrainStopsServing) {
  ASSERT_TRUE(svc_->Drain().ok());
  EXPECT_EQ(bus_.Request(subjects::kTokenIssue, "ok", 1s).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(bus_.Request("$SRV.PING", "", 1s).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace wisp::bus
