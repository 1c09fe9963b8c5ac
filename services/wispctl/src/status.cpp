#include "status.hpp"

#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace wisp::wispctl {
namespace {

std::string Millis(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3fms", static_cast<double>(ns) / 1e6);
  return buf;
}

}  // namespace

std::string FormatStatus(const std::vector<bus::ServiceInstance>& instances) {
  std::ostringstream o;
  std::map<std::string, int> counts;
  for (const auto& i : instances) ++counts[i.name];
  char line[256];
  std::snprintf(line, sizeof(line), "%-16s %-9s %-24s %-10s %-34s %9s %7s %10s\n", "SERVICE",
                "INSTANCES", "ID", "VERSION", "ENDPOINT", "REQUESTS", "ERRORS", "AVG");
  o << line;
  for (const auto& i : instances) {
    const std::string count = std::to_string(counts[i.name]);
    if (i.endpoints.empty()) {
      std::snprintf(line, sizeof(line), "%-16s %-9s %-24s %-10s %-34s %9s %7s %10s\n",
                    i.name.c_str(), count.c_str(), i.id.c_str(), i.version.c_str(), "-", "-", "-",
                    "-");
      o << line;
    }
    for (const auto& e : i.endpoints) {
      std::snprintf(line, sizeof(line), "%-16s %-9s %-24s %-10s %-34s %9llu %7llu %10s\n",
                    i.name.c_str(), count.c_str(), i.id.c_str(), i.version.c_str(),
                    e.subject.c_str(), static_cast<unsigned long long>(e.num_requests),
                    static_cast<unsigned long long>(e.num_errors),
                    Millis(e.average_processing_time_ns).c_str());
      o << line;
    }
  }
  o << counts.size() << " services, " << instances.size() << " instances answered\n";
  return o.str();
}

std::string FormatStatusJson(const std::vector<bus::ServiceInstance>& instances) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : instances) {
    nlohmann::json endpoints = nlohmann::json::array();
    for (const auto& e : i.endpoints) {
      endpoints.push_back({{"name", e.name},
                           {"subject", e.subject},
                           {"queue_group", e.queue_group},
                           {"num_requests", e.num_requests},
                           {"num_errors", e.num_errors},
                           {"last_error", e.last_error},
                           {"average_processing_time", e.average_processing_time_ns}});
    }
    out.push_back({{"name", i.name},
                   {"id", i.id},
                   {"version", i.version},
                   {"description", i.description},
                   {"started", i.started},
                   {"endpoints", endpoints}});
  }
  return out.dump(2) + "\n";
}

int RunStatus(const std::vector<std::string>& args) {
  Connection connection;
  bool json = false;
  std::string expect;
  config::Flags flags("wispctl status", "list every wisp service instance that answers on the bus");
  flags.Description(
      "Asks $SRV.PING, $SRV.INFO and $SRV.STATS (the NATS service protocol) and prints each "
      "instance with its version and per-endpoint request statistics. Exits 1 when no service "
      "answers, or when a service named by --expect does not.");
  AddConnectionFlags(flags, connection);
  flags.Bool("json", &json, "Print JSON instead of a table.");
  flags.String("expect", &expect, "Comma-separated service names that must answer.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl status", args, code)) return code;
  auto bus = Connect(connection);
  if (!bus.ok()) {
    std::cerr << "wispctl status: " << bus.status().message() << "\n";
    return 1;
  }
  auto instances = bus::Discover(**bus, connection.timeout);
  if (!instances.ok()) {
    std::cerr << "wispctl status: " << instances.status().message() << "\n";
    return 1;
  }
  std::cout << (json ? FormatStatusJson(*instances) : FormatStatus(*instances));
  std::set<std::string> seen;
  for (const auto& i : *instances) seen.insert(i.name);
  int missing = 0;
  std::stringstream names(expect);
  for (std::string name; std::getline(names, name, ',');) {
    if (!name.empty() && !seen.count(name)) {
      std::cerr << "wispctl status: " << name << " did not answer\n";
      ++missing;
    }
  }
  if (instances->empty()) {
    std::cerr << "wispctl status: no wisp service answered within "
              << config::FormatDuration(connection.timeout) << "\n";
    return 1;
  }
  return missing == 0 ? 0 : 1;
}

}  // namespace wisp::wispctl
