#include "wisp/metrics/metrics.hpp"

#include <mutex>
#include <sstream>

#include <prometheus/text_serializer.h>

#include "process_collector.hpp"
#include "wisp/http/server.hpp"
#include "wisp/log/log.hpp"

namespace wisp::metrics {

std::shared_ptr<prometheus::Registry> SharedRegistry() {
  static auto* registry =
      new std::shared_ptr<prometheus::Registry>(std::make_shared<prometheus::Registry>());
  return *registry;
}

prometheus::Registry& Registry() { return *SharedRegistry(); }

std::string Render(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return kBuckets;
}

struct Endpoint::Impl {
  std::shared_ptr<prometheus::Registry> registry;
  std::string service;
  ProcessCollector process;
  std::mutex mu;
  std::vector<std::pair<std::string, Check>> checks;
  http::ServerPtr server;
};

Endpoint::Endpoint(std::shared_ptr<prometheus::Registry> registry, std::string service)
    : impl_(std::make_unique<Impl>()) {
  impl_->registry = std::move(registry);
  impl_->service = std::move(service);
  prometheus::BuildGauge()
      .Name("wisp_build_info")
      .Help("Always 1; labels name the service and its version.")
      .Register(*impl_->registry)
      .Add({{"service", impl_->service}, {"version", WISP_VERSION}})
      .Set(1);
}

Endpoint::~Endpoint() { Stop(); }

void Endpoint::AddReadinessCheck(std::string name, Check check) {
  std::lock_guard lock(impl_->mu);
  impl_->checks.emplace_back(std::move(name), std::move(check));
}

absl::Status Endpoint::Start(const std::string& address) {
  WISP_ASSIGN_OR_RETURN(http::HostPort listen, http::ParseHostPort("metrics-address", address));
  WISP_ASSIGN_OR_RETURN(impl_->server, http::Server::Create({.address = listen.host,
                                                             .port = listen.port,
                                                             .max_body_bytes = 1024,
                                                             .threads = 1,
                                                             .name = "metrics"}));
  Impl* impl = impl_.get();
  impl_->server->Handle("GET", "/metrics", [impl](const http::Request&) {
    std::ostringstream out;
    auto families = impl->registry->Collect();
    auto process = impl->process.Collect();
    families.insert(families.end(), process.begin(), process.end());
    prometheus::TextSerializer().Serialize(out, families);
    http::Response r = http::Response::Text(200, out.str());
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  });
  impl_->server->Handle("GET", "/healthz",
                        [](const http::Request&) { return http::Response::Text(200, "ok\n"); });
  impl_->server->Handle("GET", "/readyz", [impl](const http::Request&) {
    std::vector<std::pair<std::string, Check>> checks;
    {
      std::lock_guard lock(impl->mu);
      checks = impl->checks;
    }
    std::string failing;
    for (auto& [name, check] : checks) {
      if (auto s = check(); !s.ok()) failing += name + ": " + std::string(s.message()) + "\n";
    }
    return failing.empty() ? http::Response::Text(200, "ok\n") : http::Response::Text(503, failing);
  });
  return impl_->server->Start();
}

uint16_t Endpoint::port() const { return impl_->server ? impl_->server->port() : 0; }

void Endpoint::Stop() {
  if (impl_ && impl_->server) {
    impl_->server->Stop(std::chrono::milliseconds(500));
    impl_->server.reset();
  }
}

}  // namespace wisp::metrics
