#include "status.hpp"

#include <gtest/gtest.h>

namespace wisp::wispctl {
namespace {

std::vector<bus::ServiceInstance> Sample() {
  bus::ServiceInstance token;
  token.name = "wisp-token";
  token.id = "abc123";
  token.version = "0.1.0";
  token.endpoints.push_back({.name = "issue",
                             .subject = "wisp.v1.token.issue",
                             .queue_group = "wisp-token",
                             .num_requests = 42,
                             .num_errors = 1,
                             .average_processing_time_ns = 250'000});
  bus::ServiceInstance policy;
  policy.name = "wisp-policy";
  policy.id = "def456";
  policy.version = "0.1.0";
  return {policy, token};
}

// Tests that the table names each instance, its endpoints and their counters.
TEST(StatusTest, TableListsInstancesAndEndpoints) {
  const std::string table = FormatStatus(Sample());
  EXPECT_NE(table.find("wisp.v1.token.issue"), std::string::npos) << table;
  EXPECT_NE(table.find("42"), std::string::npos);
  EXPECT_NE(table.find("0.250ms"), std::string::npos);
  EXPECT_NE(table.find("2 services, 2 instances answered"), std::string::npos);
}

// Tests that the JSON form carries the same facts.
TEST(StatusTest, JsonCarriesEndpoints) {
  const std::string json = FormatStatusJson(Sample());
  EXPECT_NE(json.find("\"num_requests\": 42"), std::string::npos) << json;
  EXPECT_NE(json.find("\"name\": \"wisp-policy\""), std::string::npos);
}

}  // namespace
}  // namespace wisp::wispctl
