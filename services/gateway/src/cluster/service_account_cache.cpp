#include "cluster/service_account_cache.hpp"

#include "wisp/log/log.hpp"
#include "wisp/metrics/metrics.hpp"

namespace wisp::gateway::cluster {
namespace {

using admission::ServiceAccountAnswer;
using Kind = ServiceAccountAnswer::Kind;

constexpr std::string_view kLastApplied = "kubectl.kubernetes.io/last-applied-configuration";
enum Source { kWatch = 0, kRemembered = 1, kGet = 2 };

int ResultIndex(Kind kind) {
  switch (kind) {
    case Kind::kFound:
      return 0;
    case Kind::kNotFound:
      return 1;
    case Kind::kError:
      break;
  }
  return 2;
}

std::string KeyOf(std::string_view ns, std::string_view name) {
  std::string key;
  key.reserve(ns.size() + name.size() + 1);
  key.append(ns).append("/").append(name);
  return key;
}

std::string KeyOf(const kube::Json& object) {
  const kube::Json meta =
      object.is_object() ? object.value("metadata", kube::Json::object()) : kube::Json::object();
  if (!meta.is_object()) return "";
  return KeyOf(meta.value("namespace", ""), meta.value("name", ""));
}

}  // namespace

std::shared_ptr<const Annotations> AnnotationsOf(const kube::Json& service_account) {
  auto out = std::make_shared<Annotations>();
  const kube::Json* meta = nullptr;
  if (service_account.is_object()) {
    auto it = service_account.find("metadata");
    if (it != service_account.end() && it->is_object()) meta = &*it;
  }
  if (meta == nullptr) return out;
  auto annotations = meta->find("annotations");
  if (annotations == meta->end() || !annotations->is_object()) return out;
  for (const auto& [key, value] : annotations->items()) {
    if (key == kLastApplied || !value.is_string()) continue;
    out->emplace(key, value.get<std::string>());
  }
  return out;
}

// Keeps the cache's map in step with the reflector (its thread).
class ServiceAccountCache::Watcher final : public kube::ReflectorHandler {
 public:
  explicit Watcher(ServiceAccountCache& cache) : cache_(cache) {}
  void OnAdd(const kube::Json& object) override {
    cache_.Put(KeyOf(object), AnnotationsOf(object));
  }
  void OnUpdate(const kube::Json&, const kube::Json& object) override {
    cache_.Put(KeyOf(object), AnnotationsOf(object));
  }
  void OnDelete(const kube::Json& object) override { cache_.Erase(KeyOf(object)); }
  void OnSynced() override {
    if (!synced_.exchange(true)) {
      static const auto logger = log::Get("serviceaccounts");
      size_t n = 0;
      {
        std::shared_lock lock(cache_.mu_);
        n = cache_.watched_.size();
      }
      SPDLOG_LOGGER_INFO(logger, "ServiceAccount cache synced: {} ServiceAccounts", n);
    }
    cache_.metrics_.synced->Set(1);
  }
  bool synced() const { return synced_.load(); }

 private:
  ServiceAccountCache& cache_;
  std::atomic<bool> synced_{false};
};

ServiceAccountCache::Metrics::Metrics(prometheus::Registry& registry) {
  auto& lookups_family =
      prometheus::BuildCounter()
          .Name("wisp_gateway_service_account_lookups_total")
          .Help(
              "ServiceAccount lookups of pod admission, by where the answer came from "
              "(watch, remembered, get: the cache missed and a live GET answered) and result")
          .Register(registry);
  const char* sources[] = {"watch", "remembered", "get"};
  const char* results[] = {"found", "not_found", "error"};
  for (int s = 0; s < 3; ++s) {
    for (int r = 0; r < 3; ++r) {
      lookups[s][r] = &lookups_family.Add({{"source", sources[s]}, {"result", results[r]}});
    }
  }
  auto& gets_family = prometheus::BuildCounter()
                          .Name("wisp_gateway_service_account_gets_total")
                          .Help("Live GETs of a ServiceAccount sent to the apiserver, by result")
                          .Register(registry);
  for (int r = 0; r < 3; ++r) gets[r] = &gets_family.Add({{"result", results[r]}});
  get_duration = &prometheus::BuildHistogram()
                      .Name("wisp_gateway_service_account_get_duration_seconds")
                      .Help("Time of a live ServiceAccount GET")
                      .Register(registry)
                      .Add({}, metrics::LatencyBuckets());
  cached = &prometheus::BuildGauge()
                .Name("wisp_gateway_service_accounts_cached")
                .Help("ServiceAccounts in the gateway's watch-fed copy")
                .Register(registry)
                .Add({});
  synced = &prometheus::BuildGauge()
                .Name("wisp_gateway_service_account_watch_synced")
                .Help("1 once the ServiceAccount watch has listed every ServiceAccount")
                .Register(registry)
                .Add({});
}

ServiceAccountCache::ServiceAccountCache(kube::Client& watch_client, kube::Client& get_client,
                                         prometheus::Registry& registry, const Clock& clock,
                                         ServiceAccountCacheOptions options)
    : get_client_(get_client), clock_(clock), options_(std::move(options)), metrics_(registry) {
  watcher_ = std::make_unique<Watcher>(*this);
  kube::ReflectorOptions ro = options_.reflector;
  ro.namespace_name = "";
  ro.name = "serviceaccounts";
  reflector_ =
      std::make_unique<kube::Reflector>(watch_client, kube::kServiceAccounts, ro, *watcher_);
}

ServiceAccountCache::~ServiceAccountCache() { Stop(); }

void ServiceAccountCache::Start() {
  {
    std::lock_guard lock(fetch_mu_);
    if (!threads_.empty()) return;
    stopping_ = false;
    for (int i = 0; i < std::max(1, options_.fetch_threads); ++i) {
      threads_.emplace_back([this] { FetchLoop(); });
    }
  }
  reflector_->Start();
}

void ServiceAccountCache::Stop() {
  reflector_->RequestStop();
  std::deque<std::string> queued;
  std::vector<std::function<void(ServiceAccountAnswer)>> failed;
  {
    std::lock_guard lock(fetch_mu_);
    stopping_ = true;
    queued.swap(queue_);
    for (const std::string& key : queued) {
      auto it = waiting_.find(key);
      if (it == waiting_.end()) continue;
      for (auto& done : it->second) failed.push_back(std::move(done));
      waiting_.erase(it);
    }
  }
  fetch_cv_.notify_all();
  for (auto& done : failed) done(ServiceAccountAnswer::Error("the gateway is stopping"));
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  reflector_->Stop();
}

bool ServiceAccountCache::Synced() const { return watcher_->synced(); }

void ServiceAccountCache::Put(const std::string& key,
                              std::shared_ptr<const Annotations> annotations) {
  std::unique_lock lock(mu_);
  watched_[key] = std::move(annotations);
  remembered_.erase(key);
  metrics_.cached->Set(static_cast<double>(watched_.size()));
}

void ServiceAccountCache::Erase(const std::string& key) {
  std::unique_lock lock(mu_);
  watched_.erase(key);
  remembered_.erase(key);
  metrics_.cached->Set(static_cast<double>(watched_.size()));
}

std::optional<ServiceAccountAnswer> ServiceAccountCache::Cached(std::string_view ns,
                                                                std::string_view name) {
  const std::string key = KeyOf(ns, name);
  std::optional<ServiceAccountAnswer> answer;
  Source source = kWatch;
  {
    std::shared_lock lock(mu_);
    if (auto it = watched_.find(key); it != watched_.end()) {
      answer = ServiceAccountAnswer::Found(it->second);
    } else if (auto r = remembered_.find(key);
               r != remembered_.end() && clock_.Steady() < r->second.expires) {
      source = kRemembered;
      answer = r->second.found ? ServiceAccountAnswer::Found(r->second.annotations)
                               : ServiceAccountAnswer::NotFound();
    }
  }
  if (answer) metrics_.lookups[source][ResultIndex(answer->kind)]->Increment();
  return answer;
}

void ServiceAccountCache::Fetch(std::string_view ns, std::string_view name,
                                std::function<void(ServiceAccountAnswer)> done) {
  std::string key = KeyOf(ns, name);
  std::string refused;
  {
    std::lock_guard lock(fetch_mu_);
    if (stopping_ || threads_.empty()) {
      refused = stopping_ ? "the gateway is stopping" : "the ServiceAccount cache is not running";
    } else if (auto it = waiting_.find(key); it != waiting_.end()) {
      it->second.push_back(std::move(done));  // shares the GET already asked for
      return;
    } else if (queue_.size() >= options_.max_pending_fetches) {
      refused =
          std::to_string(queue_.size()) + " ServiceAccount lookups already wait for the apiserver";
    } else {
      waiting_[key].push_back(std::move(done));
      queue_.push_back(std::move(key));
    }
  }
  if (!refused.empty()) {
    metrics_.lookups[kGet][ResultIndex(Kind::kError)]->Increment();
    done(ServiceAccountAnswer::Error(refused));
    return;
  }
  fetch_cv_.notify_one();
}

void ServiceAccountCache::FetchLoop() {
  while (true) {
    std::string key;
    {
      std::unique_lock lock(fetch_mu_);
      fetch_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      key = std::move(queue_.front());
      queue_.pop_front();
    }
    ServiceAccountAnswer answer = Get(key);
    Remember(key, answer);
    std::vector<std::function<void(ServiceAccountAnswer)>> waiters;
    {
      std::lock_guard lock(fetch_mu_);
      auto it = waiting_.find(key);
      if (it != waiting_.end()) {
        waiters = std::move(it->second);
        waiting_.erase(it);
      }
    }
    auto* counter = metrics_.lookups[kGet][ResultIndex(answer.kind)];
    for (auto& done : waiters) {
      counter->Increment();
      done(answer);
    }
  }
}

ServiceAccountAnswer ServiceAccountCache::Get(const std::string& key) {
  static const auto logger = log::Get("serviceaccounts");
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string name = key.substr(slash + 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto object = get_client_.Get(kube::kServiceAccounts, ns, name);
  metrics_.get_duration->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ServiceAccountAnswer answer;
  if (object.ok()) {
    answer = ServiceAccountAnswer::Found(AnnotationsOf(*object));
    SPDLOG_LOGGER_DEBUG(logger, "{}: not in the watch's copy yet; read from the apiserver", key);
  } else if (absl::IsNotFound(object.status())) {
    answer = ServiceAccountAnswer::NotFound();
    SPDLOG_LOGGER_DEBUG(logger, "{}: no such ServiceAccount", key);
  } else {
    answer = ServiceAccountAnswer::Error(std::string(object.status().message()));
    SPDLOG_LOGGER_WARN(logger, "{}: {}", key, object.status().ToString());
  }
  metrics_.gets[ResultIndex(answer.kind)]->Increment();
  return answer;
}

void ServiceAccountCache::Remember(const std::string& key, const ServiceAccountAnswer& answer) {
  if (answer.kind == Kind::kError) return;
  const auto ttl = answer.kind == Kind::kFound ? options_.fetched_ttl : options_.missing_ttl;
  if (ttl.count() <= 0) return;
  const auto now = clock_.Steady();
  std::unique_lock lock(mu_);
  // The watch got there first: its copy is the answer already.
  if (watched_.count(key) != 0) return;
  if (remembered_.size() >= options_.max_remembered) {
    for (auto it = remembered_.begin(); it != remembered_.end();) {
      it = now >= it->second.expires ? remembered_.erase(it) : std::next(it);
    }
    if (remembered_.size() >= options_.max_remembered) return;
  }
  remembered_[key] = Remembered{answer.kind == Kind::kFound, answer.annotations, now + ttl};
}

}  // namespace wisp::gateway::cluster
