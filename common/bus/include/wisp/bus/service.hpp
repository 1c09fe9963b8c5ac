#pragma once
// bus::Service: a NATS service ("micro", ADR-32) on top of any Subscriber (NatsBus or InMemoryBus).
//
// Contract:
//   - Start() subscribes (no queue group: every instance answers) to $SRV.PING, $SRV.PING.<name>,
//     $SRV.PING.<name>.<id>, and the same for $SRV.INFO and $SRV.STATS, answering JSON of types
//     io.nats.micro.v1.ping_response / info_response / stats_response, so `nats micro ls` and
//     `wispctl status` see every instance with its name, id, version and endpoints.
//   - AddEndpoint() serves `subject` in `queue_group` (default: the service name) with `handler`,
//     wrapped to count requests, errors (any non-OK reply), the last error and processing time for
//     STATS, and to export wisp_bus_requests_total{service,endpoint,code} and
//     wisp_bus_request_duration_seconds{service,endpoint}. Requests the bus rejects before the
//     handler (deadline already passed) are not counted. With options.loop_connections > 0 the
//     endpoint is served by ServeOnLoops (its own event-loop connections), counted the same way.
//   - Name: letters, digits, '-' and '_'; version: semantic version (1.2.3[-pre][+build]); bad
//     values are InvalidArgument naming the field.
//   - Drain() drains every endpoint and the discovery subscriptions; the destructor unsubscribes.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(auto svc, bus::Service::Start(bus, {.name = "wisp-token",
//                                                             .version = WISP_VERSION,
//                                                             .registry = &metrics::Registry()}));
//   WISP_RETURN_IF_ERROR(svc->AddEndpoint("issue", subjects::kTokenIssue, queues::kToken,
//   handler));
//
// Discovery (wispctl status):
//   WISP_ASSIGN_OR_RETURN(auto instances, bus::Discover(bus, std::chrono::milliseconds(500)));
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/bus/bus.hpp"

namespace prometheus {
class Registry;
}

namespace wisp::bus {

struct ServiceConfig {
  std::string name;
  std::string version;
  std::string description;
  std::map<std::string, std::string> metadata;
  prometheus::Registry* registry = nullptr;  // not owned; nullptr = no metrics
};

// What STATS reports for one endpoint (also what Discover() parses back).
struct EndpointStats {
  std::string name;
  std::string subject;
  std::string queue_group;
  uint64_t num_requests = 0;
  uint64_t num_errors = 0;
  std::string last_error;
  int64_t processing_time_ns = 0;
  int64_t average_processing_time_ns = 0;
};

struct EndpointOptions {
  // > 0: serve on that many event-loop connections of its own (Subscriber::ServeOnLoops), for a
  // hot endpoint whose handler is short.
  int loop_connections = 0;
};

class Service {
 public:
  static absl::StatusOr<std::unique_ptr<Service>> Start(Subscriber& bus, ServiceConfig config);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // queue_group "" means the service name.
  absl::Status AddEndpoint(std::string_view name, std::string_view subject,
                           std::string_view queue_group, RequestHandler handler,
                           EndpointOptions options = {});

  const std::string& name() const;
  const std::string& id() const;
  // The JSON bodies the discovery subjects answer.
  std::string PingJson() const;
  std::string InfoJson() const;
  std::string StatsJson() const;

  absl::Status Drain();

  struct Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One running instance as discovery sees it.
struct ServiceInstance {
  std::string name;
  std::string id;
  std::string version;
  std::string description;
  std::map<std::string, std::string> metadata;
  std::string started;                   // RFC 3339, from STATS ("" when STATS did not answer)
  std::vector<EndpointStats> endpoints;  // from STATS, else INFO (counters 0)
  bool answered_info = false;
  bool answered_stats = false;
};

// Asks $SRV.PING, $SRV.INFO and $SRV.STATS (in parallel, each collecting replies for `timeout`)
// and returns every instance that answered PING, sorted by name then id. `name` restricts the
// query to one service. Replies that do not parse are skipped.
absl::StatusOr<std::vector<ServiceInstance>> Discover(Bus& bus, std::chrono::milliseconds timeout,
                                                      std::string_view name = {});

}  // namespace wisp::bus
