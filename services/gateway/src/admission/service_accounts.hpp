#pragma once
// Where pod admission reads a pod's ServiceAccount (issue 25, "race-free injection"): the
// ServiceAccount's annotations travel to wisp-policy in AdmissionCall.service_account_annotations,
// so identity presets can be chosen per ServiceAccount (eks.amazonaws.com/role-arn and the like).
//
// Contract for an implementation (the gateway's is cluster/service_account_cache.hpp):
//   - Cached() answers without I/O and without waiting on anything but a short lock: from a
//     watch-fed copy, or a recent live answer it remembers. nullopt when it has no answer.
//   - Fetch() asks the apiserver (a live GET) off the calling thread and calls `done` exactly
//     once, from another thread (or at once on the calling thread when it cannot even start one:
//     stopping, too many pending). Its time is bounded by the implementation's GET timeout.
//   - Both are thread-safe; the admission webhooks call them from the HTTPS I/O threads.
//
// Example (AdmissionHandler):
//   if (auto a = source->Cached(ns, name)) { Send(*a); }
//   else source->Fetch(ns, name, [](ServiceAccountAnswer a) { Send(a); });
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace wisp::gateway::admission {

struct ServiceAccountAnswer {
  enum class Kind { kFound, kNotFound, kError };
  Kind kind = Kind::kNotFound;
  // kFound: its annotations (never null then), shared with the cache that holds them.
  std::shared_ptr<const std::map<std::string, std::string>> annotations;
  std::string error;  // kError: why (names the ServiceAccount)

  static ServiceAccountAnswer Found(std::shared_ptr<const std::map<std::string, std::string>> a) {
    return {Kind::kFound, std::move(a), ""};
  }
  static ServiceAccountAnswer NotFound() { return {Kind::kNotFound, nullptr, ""}; }
  static ServiceAccountAnswer Error(std::string why) {
    return {Kind::kError, nullptr, std::move(why)};
  }
};

class ServiceAccountSource {
 public:
  virtual ~ServiceAccountSource() = default;
  virtual std::optional<ServiceAccountAnswer> Cached(std::string_view ns,
                                                     std::string_view name) = 0;
  virtual void Fetch(std::string_view ns, std::string_view name,
                     std::function<void(ServiceAccountAnswer)> done) = 0;
};

}  // namespace wisp::gateway::admission
