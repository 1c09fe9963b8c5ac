#include "wisp/bus/service.hpp"

#include <algorithm>
#include <ctime>
#include <future>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "bus_metrics.hpp"
#include "wisp/bus/subjects.hpp"

namespace wisp::bus {
namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kPingType = "io.nats.micro.v1.ping_response";
constexpr std::string_view kInfoType = "io.nats.micro.v1.info_response";
constexpr std::string_view kStatsType = "io.nats.micro.v1.stats_response";

bool ValidName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

bool ValidVersion(const std::string& v) {
  // semver.org's grammar, slightly condensed.
  static const std::regex kSemver(
      R"(^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$)");
  return std::regex_match(v, kSemver);
}

std::string NewId() {
  static constexpr char kAlphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(SteadyClock::now().time_since_epoch().count()));
  std::string id(22, '0');
  for (char& c : id) c = kAlphabet[rng() % 62];
  return id;
}

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
  const auto frac = std::chrono::duration_cast<std::chrono::nanoseconds>(t - secs).count();
  const std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[96];
  std::snprintf(out, sizeof(out), "%s.%09lldZ", buf, static_cast<long long>(frac));
  return out;
}

}  // namespace

struct Service::Impl {
  struct Endpoint {
    EndpointStats stats;  // guarded by mu
    std::mutex mu;
    CallSeries* series = nullptr;
    prometheus::Labels labels;
    RequestHandler handler;
    SubscriptionPtr sub;
  };

  Subscriber& bus;
  ServiceConfig config;
  std::string id;
  std::chrono::system_clock::time_point started;
  std::unique_ptr<BusServerMetrics> metrics;
  mutable std::mutex mu;  // guards endpoints (the list; each endpoint has its own lock)
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::vector<SubscriptionPtr> discovery;

  Impl(Subscriber& b, ServiceConfig c) : bus(b), config(std::move(c)) {}

  json Base(std::string_view type) const {
    json j;
    j["type"] = type;
    j["name"] = config.name;
    j["id"] = id;
    j["version"] = config.version;
    j["metadata"] = config.metadata;
    return j;
  }

  std::string Ping() const { return Base(kPingType).dump(); }

  std::string Info() const {
    json j = Base(kInfoType);
    j["description"] = config.description;
    json eps = json::array();
    std::lock_guard lock(mu);
    for (const auto& ep : endpoints) {
      std::lock_guard el(ep->mu);
      eps.push_back({{"name", ep->stats.name},
                     {"subject", ep->stats.subject},
                     {"queue_group", ep->stats.queue_group},
                     {"metadata", json::object()}});
    }
    j["endpoints"] = std::move(eps);
    return j.dump();
  }

  std::string Stats() const {
    json j = Base(kStatsType);
    j["started"] = Rfc3339(started);
    json eps = json::array();
    std::lock_guard lock(mu);
    for (const auto& ep : endpoints) {
      std::lock_guard el(ep->mu);
      const auto& s = ep->stats;
      eps.push_back({{"name", s.name},
                     {"subject", s.subject},
                     {"queue_group", s.queue_group},
                     {"num_requests", s.num_requests},
                     {"num_errors", s.num_errors},
                     {"last_error", s.last_error},
                     {"processing_time", s.processing_time_ns},
                     {"average_processing_time", s.average_processing_time_ns}});
    }
    j["endpoints"] = std::move(eps);
    return j.dump();
  }

  absl::Status ServeDiscovery(std::string_view verb_subject, std::function<std::string()> body) {
    const std::string base(verb_subject);
    for (const std::string& subject :
         {base, base + "." + config.name, base + "." + config.name + "." + id}) {
      auto sub = bus.Serve(subject, "", [body](const Request&) { return Reply::Ok(body()); });
      if (!sub.ok()) return Annotate(sub.status(), "registering " + subject);
      discovery.push_back(*std::move(sub));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Service>> Service::Start(Subscriber& bus, ServiceConfig config) {
  if (!ValidName(config.name)) {
    return absl::InvalidArgumentError("service name \"" + config.name +
                                      "\": use letters, digits, '-' and '_'");
  }
  if (!ValidVersion(config.version)) {
    return absl::InvalidArgumentError("service version \"" + config.version +
                                      "\": not a semantic version (1.2.3)");
  }
  auto impl = std::make_unique<Impl>(bus, std::move(config));
  impl->id = NewId();
  impl->started = std::chrono::system_clock::now();
  if (impl->config.registry != nullptr) {
    impl->metrics = std::make_unique<BusServerMetrics>(*impl->config.registry);
  }
  Impl* self = impl.get();
  WISP_RETURN_IF_ERROR(self->ServeDiscovery(subjects::kSrvPing, [self] { return self->Ping(); }));
  WISP_RETURN_IF_ERROR(self->ServeDiscovery(subjects::kSrvInfo, [self] { return self->Info(); }));
  WISP_RETURN_IF_ERROR(self->ServeDiscovery(subjects::kSrvStats, [self] { return self->Stats(); }));
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Service::~Service() {
  // Unsubscribe (waiting for in-flight handlers) before the endpoint state goes away.
  impl_->discovery.clear();
  std::vector<SubscriptionPtr> subs;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& ep : impl_->endpoints) subs.push_back(std::move(ep->sub));
  }
  subs.clear();
}

absl::Status Service::AddEndpoint(std::string_view name, std::string_view subject,
                                  std::string_view queue_group, RequestHandler handler,
                                  EndpointOptions options) {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError("endpoint name \"" + std::string(name) +
                                      "\": use letters, digits, '-' and '_'");
  }
  if (subject.empty())
    return absl::InvalidArgumentError("endpoint " + std::string(name) + ": empty subject");
  if (!handler) return absl::InvalidArgumentError("endpoint " + std::string(name) + ": no handler");
  auto ep = std::make_unique<Impl::Endpoint>();
  ep->stats.name = std::string(name);
  ep->stats.subject = std::string(subject);
  ep->stats.queue_group = queue_group.empty() ? impl_->config.name : std::string(queue_group);
  ep->handler = std::move(handler);
  ep->labels = {{"service", impl_->config.name}, {"endpoint", ep->stats.name}};
  if (impl_->metrics) {
    ep->series = &impl_->metrics->cache.Get(impl_->config.name + "/" + ep->stats.name, ep->labels);
  }
  Impl::Endpoint* raw = ep.get();
  BusServerMetrics* metrics = impl_->metrics.get();
  auto wrapped = [raw, metrics](const Request& req) -> Reply {
    const auto start = SteadyClock::now();
    Reply reply = raw->handler(req);
    const auto elapsed = SteadyClock::now() - start;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
    {
      std::lock_guard lock(raw->mu);
      auto& s = raw->stats;
      ++s.num_requests;
      if (!reply.status.ok()) {
        ++s.num_errors;
        s.last_error = std::string(StatusCodeName(reply.status.code())) + ": " +
                       std::string(reply.status.message());
      }
      s.processing_time_ns += ns;
      s.average_processing_time_ns = s.processing_time_ns / static_cast<int64_t>(s.num_requests);
    }
    if (metrics != nullptr) {
      metrics->cache.Record(*raw->series, reply.status.code(),
                            std::chrono::duration<double>(elapsed).count());
    }
    return reply;
  };
  // ServeOnLoops serves with Serve when loop_connections is 0.
  WISP_ASSIGN_OR_RETURN(raw->sub, impl_->bus.ServeOnLoops(subject, raw->stats.queue_group, wrapped,
                                                          options.loop_connections));
  std::lock_guard lock(impl_->mu);
  impl_->endpoints.push_back(std::move(ep));
  return absl::OkStatus();
}

const std::string& Service::name() const { return impl_->config.name; }
const std::string& Service::id() const { return impl_->id; }
std::string Service::PingJson() const { return impl_->Ping(); }
std::string Service::InfoJson() const { return impl_->Info(); }
std::string Service::StatsJson() const { return impl_->Stats(); }

absl::Status Service::Drain() {
  absl::Status result = absl::OkStatus();
  std::vector<Subscription*> subs;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& ep : impl_->endpoints) {
      if (ep->sub) subs.push_back(ep->sub.get());
    }
  }
  for (auto& d : impl_->discovery) subs.push_back(d.get());
  for (auto* s : subs) {
    if (absl::Status st = s->Drain(); !st.ok() && result.ok()) result = st;
  }
  return result;
}

// ---- Discovery ----

namespace {

std::map<std::string, std::string> Metadata(const json& j) {
  std::map<std::string, std::string> out;
  if (auto it = j.find("metadata"); it != j.end() && it->is_object()) {
    for (const auto& [k, v] : it->items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return out;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

std::vector<EndpointStats> Endpoints(const json& j) {
  std::vector<EndpointStats> out;
  auto it = j.find("endpoints");
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& e : *it) {
    if (!e.is_object()) continue;
    EndpointStats s;
    s.name = Str(e, "name");
    s.subject = Str(e, "subject");
    s.queue_group = Str(e, "queue_group");
    s.num_requests = static_cast<uint64_t>(Int(e, "num_requests"));
    s.num_errors = static_cast<uint64_t>(Int(e, "num_errors"));
    s.last_error = Str(e, "last_error");
    s.processing_time_ns = Int(e, "processing_time");
    s.average_processing_time_ns = Int(e, "average_processing_time");
    out.push_back(std::move(s));
  }
  return out;
}

// Parses replies of one discovery verb, keeping those of the expected type.
std::vector<json> Parse(const absl::StatusOr<std::vector<Message>>& replies,
                        std::string_view type) {
  std::vector<json> out;
  if (!replies.ok()) return out;
  for (const auto& m : *replies) {
    if (!StatusFromHeaders(m.headers).ok()) continue;
    json j = json::parse(m.data, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || Str(j, "type") != type || Str(j, "id").empty()) continue;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ServiceInstance>> Discover(Bus& bus, std::chrono::milliseconds timeout,
                                                      std::string_view name) {
  // append, not "." + std::string(name): GCC 12 at -O3 reports a false -Werror=restrict on the
  // inlined operator+ ("'__builtin_memcpy' ... may overlap").
  const std::string suffix = name.empty() ? std::string() : std::string(".").append(name);
  auto ask = [&](std::string_view verb) {
    return std::async(std::launch::async, [&bus, subject = std::string(verb) + suffix, timeout] {
      return bus.RequestMany(subject, "", timeout);
    });
  };
  auto ping_f = ask(subjects::kSrvPing);
  auto info_f = ask(subjects::kSrvInfo);
  auto stats_f = ask(subjects::kSrvStats);
  auto ping = ping_f.get();
  auto info = info_f.get();
  auto stats = stats_f.get();
  if (!ping.ok()) return Annotate(ping.status(), "discovery ping");

  std::map<std::string, ServiceInstance> by_id;
  for (const auto& j : Parse(ping, kPingType)) {
    ServiceInstance& s = by_id[Str(j, "id")];
    s.id = Str(j, "id");
    s.name = Str(j, "name");
    s.version = Str(j, "version");
    s.metadata = Metadata(j);
  }
  for (const auto& j : Parse(info, kInfoType)) {
    auto it = by_id.find(Str(j, "id"));
    if (it == by_id.end()) continue;
    it->second.description = Str(j, "description");
    it->second.endpoints = Endpoints(j);
    it->second.answered_info = true;
  }
  for (const auto& j : Parse(stats, kStatsType)) {
    auto it = by_id.find(Str(j, "id"));
    if (it == by_id.end()) continue;
    it->second.started = Str(j, "started");
    it->second.endpoints = Endpoints(j);
    it->second.answered_stats = true;
  }
  std::vector<ServiceInstance> out;
  for (auto& [id, s] : by_id) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(), [](const ServiceInstance& a, const ServiceInstance& b) {
    return a.name != b.name ? a.name < b.name : a.id < b.id;
  });
  return out;
}

}  // namespace wisp::bus
