#pragma once
// The gateway's copy of every ServiceAccount's annotations, for pod admission (issue 25 item 3,
// "race-free injection"): wisp-policy chooses identity presets from a pod's ServiceAccount
// (eks.amazonaws.com/role-arn, azure.workload.identity/client-id, ...), so a pod created right
// after its ServiceAccount must see that ServiceAccount as the apiserver holds it. IRSA reads
// only its informer's copy and mutates nothing when the copy lags (its issues #174, #264); this
// cache falls back to the apiserver itself.
//
// Contract:
//   - Start(): a kube::Reflector over serviceaccounts in every namespace keeps a map
//     "<namespace>/<name>" -> annotations (only the annotations are kept here; kubectl's
//     kubectl.kubernetes.io/last-applied-configuration is dropped: it is the object again).
//   - Cached(ns, name) answers without I/O: the watch's copy when it has the ServiceAccount; else a
//     live answer remembered for fetched_ttl (found) or missing_ttl (not found); else nullopt. A
//     watch event for a ServiceAccount (added, changed, deleted) forgets what was remembered for
//     it, so the watch's copy is the answer from then on.
//   - Fetch(ns, name, done): a GET on one of fetch_threads threads, through `get_client` (whose
//     request timeout bounds it: the gateway gives it a client of its own, one try, the GET
//     timeout as its request timeout). Concurrent fetches of one ServiceAccount share one GET.
//     NotFound -> kNotFound; any other failure -> kError, not remembered. More than
//     max_pending_fetches waiting, or stopping: kError at once, on the calling thread.
//   - Stop() fails the fetches still queued (kError "stopping") and joins the threads; it waits
//     at most for the GETs in progress.
//   - Metrics: wisp_gateway_service_account_lookups_total{source=watch|remembered|get,
//     result=found|not_found|error} (every answer given; source get = a live GET was needed, the
//     cache missed), wisp_gateway_service_account_gets_total{result} (GETs sent, after sharing),
//     wisp_gateway_service_account_get_duration_seconds, wisp_gateway_service_accounts_cached
//     (ServiceAccounts in the watch's copy), wisp_gateway_service_account_watch_synced (1 once
//     listed).
//
// Example (gateway.cpp):
//   cluster::ServiceAccountCache accounts(*kube, *kube_get, registry, SystemClock::Instance(), {});
//   accounts.Start();
//   admission_options.service_accounts = &accounts;
//   ...
//   accounts.Stop();
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "admission/service_accounts.hpp"
#include "wisp/kube/client.hpp"
#include "wisp/kube/reflector.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::gateway::cluster {

struct ServiceAccountCacheOptions {
  std::chrono::milliseconds fetched_ttl{std::chrono::seconds(5)};
  std::chrono::milliseconds missing_ttl{std::chrono::seconds(1)};
  int fetch_threads = 2;
  size_t max_pending_fetches = 256;
  size_t max_remembered = 4096;
  kube::ReflectorOptions reflector;  // namespace_name and name are set here
};

using Annotations = std::map<std::string, std::string>;

// The annotations of a ServiceAccount object, less kubectl's last-applied-configuration.
std::shared_ptr<const Annotations> AnnotationsOf(const kube::Json& service_account);

class ServiceAccountCache final : public admission::ServiceAccountSource {
 public:
  ServiceAccountCache(kube::Client& watch_client, kube::Client& get_client,
                      prometheus::Registry& registry, const Clock& clock,
                      ServiceAccountCacheOptions options);
  ~ServiceAccountCache() override;
  ServiceAccountCache(const ServiceAccountCache&) = delete;
  ServiceAccountCache& operator=(const ServiceAccountCache&) = delete;

  void Start();
  void Stop();
  bool Synced() const;

  std::optional<admission::ServiceAccountAnswer> Cached(std::string_view ns,
                                                        std::string_view name) override;
  void Fetch(std::string_view ns, std::string_view name,
             std::function<void(admission::ServiceAccountAnswer)> done) override;

  class Watcher;

 private:
  struct Remembered {
    bool found = false;
    std::shared_ptr<const Annotations> annotations;
    std::chrono::steady_clock::time_point expires;
  };
  struct Metrics {
    explicit Metrics(prometheus::Registry& registry);
    prometheus::Counter* lookups[3][3];  // [source watch|remembered|get][result]
    prometheus::Counter* gets[3];        // [result found|not_found|error]
    prometheus::Histogram* get_duration;
    prometheus::Gauge* cached;
    prometheus::Gauge* synced;
  };

  void Put(const std::string& key, std::shared_ptr<const Annotations> annotations);
  void Erase(const std::string& key);
  void FetchLoop();
  admission::ServiceAccountAnswer Get(const std::string& key);
  void Remember(const std::string& key, const admission::ServiceAccountAnswer& answer);

  kube::Client& get_client_;
  const Clock& clock_;
  const ServiceAccountCacheOptions options_;
  Metrics metrics_;
  std::unique_ptr<Watcher> watcher_;
  std::unique_ptr<kube::Reflector> reflector_;

  // The watch's copy and the remembered live answers; read on every pod admission.
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Annotations>> watched_;
  std::unordered_map<std::string, Remembered> remembered_;

  // Fetches: keys waiting for a thread, and everyone waiting on each key's GET.
  std::mutex fetch_mu_;
  std::condition_variable fetch_cv_;
  bool stopping_ = false;
  std::deque<std::string> queue_;
  std::unordered_map<std::string, std::vector<std::function<void(admission::ServiceAccountAnswer)>>>
      waiting_;
  std::vector<std::thread> threads_;
};

}  // namespace wisp::gateway::cluster
