#pragma once
// kube::Client: wisp's Kubernetes API client (the third door of DESIGN.md, "Shape"), over JSON
// objects (nlohmann::json), built on the one outbound http::Client of common/http.
//
// Contract:
//   - Resources are named by group, version and plural (a Resource); paths follow the apiserver:
//     /api/v1/... for the core group, /apis/<group>/<version>/... otherwise, with
//     namespaces/<ns>/ for a namespaced resource ("" namespace: every namespace, List and Watch).
//   - Get, List (every page: limit/continue; labelSelector, fieldSelector; the items, each with
//     its apiVersion and kind filled in, and the list's resourceVersion; a continue token that
//     expired mid-way restarts the list once without pages), Create, Update (PUT), UpdateStatus
//     (PUT .../status), Patch (JSON merge, RFC 6902 JSON, strategic merge or server-side apply
//     with fieldManager and force; optionally on a subresource such as "status"), Delete
//     (propagationPolicy, preconditions uid/resourceVersion).
//   - Errors: the apiserver's Status body, mapped as errors.hpp says (NotFound, AlreadyExists,
//     Conflict -> Aborted, ...), the message naming verb, resource, namespace/name and the
//     apiserver's message; transport errors keep http::Client's codes, prefixed the same way.
//   - 429, and a 5xx carrying Retry-After, are retried after Retry-After (1 s when absent; capped
//     at max_retry_after), at most max_attempts tries in all. A 401 with a token file re-reads the
//     file once and retries (kubelet rotated the token). Every request first takes a token of the
//     client-side rate limit (qps, burst; default 20 and 30, as client-go).
//   - Watch() streams events: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR. An ERROR event carrying a
//     410 (the resourceVersion is too old) is the OutOfRange error of IsGone(); other ERROR
//     events are returned as events. Next() gives nullopt when the server ended the watch
//     (timeoutSeconds); a blocked read waits at most the watch's read timeout.
//   - Tokens are sent per request, never logged. Thread-safe; a WatchStream belongs to one thread.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(kube::Config config, kube::LoadFromEnvironment());
//   WISP_ASSIGN_OR_RETURN(kube::ClientPtr kube, kube::NewClient(config));
//   WISP_ASSIGN_OR_RETURN(Json cm, kube->Get(kube::kConfigMaps, "default", "app"));
//   WISP_ASSIGN_OR_RETURN(kube::ListResult pods,
//                         kube->List(kube::kPods, "default", {.label_selector = "app=web"}));
//   WISP_ASSIGN_OR_RETURN(Json applied,
//       kube->Patch(kube::kConfigMaps, "default", "app", desired,
//                   {.type = kube::PatchType::kApply, .field_manager = "wisp", .force = true}));
//   WISP_ASSIGN_OR_RETURN(kube::WatchPtr w,
//       kube->Watch(kube::kPods, "default", {.resource_version = pods.resource_version}));
//   while (true) {
//     WISP_ASSIGN_OR_RETURN(std::optional<kube::WatchEvent> e, w->Next());
//     if (!e) break;  // the server ended the watch: watch again from the last resourceVersion
//   }
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wisp/http/client.hpp"
#include "wisp/kube/config.hpp"
#include "wisp/kube/errors.hpp"
#include "wisp/kube/rate_limit.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/status/status.hpp"

namespace wisp::kube {

using Json = nlohmann::json;

struct Resource {
  std::string group;  // "" = the core group
  std::string version;
  std::string plural;
  bool namespaced = true;
  // "v1" or "<group>/<version>".
  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
};

inline const Resource kPods{"", "v1", "pods", true};
inline const Resource kPersistentVolumeClaims{"", "v1", "persistentvolumeclaims", true};
inline const Resource kPersistentVolumes{"", "v1", "persistentvolumes", false};
inline const Resource kConfigMaps{"", "v1", "configmaps", true};
inline const Resource kEvents{"", "v1", "events", true};
inline const Resource kServiceAccounts{"", "v1", "serviceaccounts", true};
inline const Resource kNamespaces{"", "v1", "namespaces", false};
inline const Resource kDataVolumes{"cdi.kubevirt.io", "v1beta1", "datavolumes", true};
inline const Resource kVolumeImportSources{"wisp.dev", "v1alpha1", "volumeimportsources", true};
// CDI's own VolumeImportSource (wisp imports its http and blank sources).
inline const Resource kCdiVolumeImportSources{"cdi.kubevirt.io", "v1beta1", "volumeimportsources",
                                              true};
inline const Resource kVirtualMachineInstances{"kubevirt.io", "v1", "virtualmachineinstances",
                                               true};

// The URL path of a collection (name "") or an object, with an optional subresource.
std::string ResourcePath(const Resource& resource, std::string_view ns, std::string_view name = "",
                         std::string_view subresource = "");
// RFC 3986 query escaping: everything but unreserved characters is %XX.
std::string QueryEscape(std::string_view value);

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;  // limit per request; 0 = one request without pages
};

struct ListResult {
  std::vector<Json> items;
  std::string resource_version;  // the list's: watch from here
};

enum class PatchType { kMerge, kJson, kStrategicMerge, kApply };

struct PatchOptions {
  PatchType type = PatchType::kMerge;
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take fields other managers own
  std::string subresource;    // "" or "status"
};

struct DeleteOptions {
  std::string propagation_policy;  // "", "Foreground", "Background", "Orphan"
  std::string uid;                 // precondition
  std::string resource_version;    // precondition
  std::optional<int64_t> grace_period_seconds;
};

struct WatchOptions {
  std::string resource_version;
  std::string label_selector;
  std::string field_selector;
  bool allow_bookmarks = true;
  std::optional<int64_t> timeout_seconds;  // the server ends the watch after this long
  // Each read waits at most this long (default: the client's watch_read_timeout).
  std::optional<std::chrono::milliseconds> read_timeout;
};

enum class EventType { kAdded, kModified, kDeleted, kBookmark, kError };
std::string_view EventTypeName(EventType type);

struct WatchEvent {
  EventType type = EventType::kAdded;
  Json object;
};

// Parses one line of a watch stream: {"type": ..., "object": {...}}. InvalidArgument for a line
// that is not such an event; OutOfRange for an ERROR event carrying a 410 Status.
absl::StatusOr<WatchEvent> ParseWatchEvent(std::string_view line, std::string_view context);

class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // The next event; nullopt when the server ended the watch.
  virtual absl::StatusOr<std::optional<WatchEvent>> Next() = 0;
};
using WatchPtr = std::unique_ptr<WatchStream>;

class Client {
 public:
  virtual ~Client() = default;
  virtual absl::StatusOr<Json> Get(const Resource& resource, std::string_view ns,
                                   std::string_view name) = 0;
  virtual absl::StatusOr<ListResult> List(const Resource& resource, std::string_view ns,
                                          const ListOptions& options = {}) = 0;
  // The object's metadata.namespace, when set, must agree with `ns`.
  virtual absl::StatusOr<Json> Create(const Resource& resource, std::string_view ns,
                                      const Json& object) = 0;
  // PUT of the whole object (metadata.name; metadata.resourceVersion makes it conditional).
  virtual absl::StatusOr<Json> Update(const Resource& resource, std::string_view ns,
                                      const Json& object) = 0;
  virtual absl::StatusOr<Json> UpdateStatus(const Resource& resource, std::string_view ns,
                                            const Json& object) = 0;
  virtual absl::StatusOr<Json> Patch(const Resource& resource, std::string_view ns,
                                     std::string_view name, const Json& patch,
                                     const PatchOptions& options = {}) = 0;
  virtual absl::Status Delete(const Resource& resource, std::string_view ns, std::string_view name,
                              const DeleteOptions& options = {}) = 0;
  virtual absl::StatusOr<WatchPtr> Watch(const Resource& resource, std::string_view ns,
                                         const WatchOptions& options = {}) = 0;
};
using ClientPtr = std::unique_ptr<Client>;

struct ClientOptions {
  double qps = 20;  // <= 0: no client-side limit
  int burst = 30;
  int max_attempts = 5;  // tries in all for a 429 / 5xx with Retry-After
  std::chrono::milliseconds max_retry_after{std::chrono::seconds(10)};
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};  // non-watch requests
  std::chrono::milliseconds watch_read_timeout{std::chrono::seconds(60)};
  std::string user_agent = "wisp";
  const Clock* clock = nullptr;  // nullptr: SystemClock (rate limit, token refresh)
  Sleeper* sleeper = nullptr;    // nullptr: RealSleeper (rate limit, Retry-After)
};

// A client over `http` (not owned; it must outlive the client): the server, namespace and tokens
// of `config`; its TLS must already be in `http` (NewClient does that).
ClientPtr NewClient(http::Client& http, Config config, ClientOptions options = {});
// A client that owns an http::Client built from `config` (CA, client certificate, server name).
absl::StatusOr<ClientPtr> NewClient(const Config& config, ClientOptions options = {});

}  // namespace wisp::kube
