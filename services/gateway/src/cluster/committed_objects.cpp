#include "cluster/committed_objects.hpp"

#include <algorithm>
#include <thread>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::gateway::cluster {

const std::vector<WatchedKind>& RecordedKinds() {
  static const std::vector<WatchedKind> kKinds = {
      {kube::kPersistentVolumeClaims, "PersistentVolumeClaim"},
      {kube::kDataVolumes, "DataVolume"},
      {kube::kVolumeImportSources, "VolumeImportSource"},
      {kube::kCdiVolumeImportSources, "VolumeImportSource", "VolumeImportSource.cdi.kubevirt.io"},
  };
  return kKinds;
}

namespace {

void SetKind(const WatchedKind& kind, v1::CommittedObject& out) {
  out.mutable_kind()->set_group(kind.resource.group);
  out.mutable_kind()->set_version(kind.resource.version);
  out.mutable_kind()->set_kind(kind.kind);
}

std::string MetaString(const kube::Json& object, const char* field) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto it = meta->find(field);
  return it != meta->end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

v1::CommittedObject ToCommitted(const WatchedKind& kind, std::string_view event,
                                const kube::Json& object) {
  v1::CommittedObject out;
  out.set_event(std::string(event));
  SetKind(kind, out);
  out.set_namespace_(MetaString(object, "namespace"));
  out.set_name(MetaString(object, "name"));
  // A list's items carry neither apiVersion nor kind; the rules read both.
  kube::Json stored = object;
  stored["apiVersion"] = kind.resource.ApiVersion();
  stored["kind"] = kind.kind;
  out.set_object_json(stored.dump());
  return out;
}

v1::CommittedObject ToSynced(const WatchedKind& kind, const std::vector<kube::Json>& objects) {
  v1::CommittedObject out;
  out.set_event("SYNCED");
  SetKind(kind, out);
  kube::Json names = kube::Json::array();
  for (const auto& o : objects) {
    names.push_back(MetaString(o, "namespace") + "/" + MetaString(o, "name"));
  }
  out.set_object_json(names.dump());
  return out;
}

// Sends one kind's events to wisp-policy, in order, retrying until each is taken.
class CommittedObjects::Forwarder final : public kube::ReflectorHandler {
 public:
  Forwarder(WatchedKind kind, bus::Requester& bus, prometheus::Registry& registry,
            const CommittedObjectsOptions& options, const std::atomic<bool>& stopping)
      : kind_(std::move(kind)),
        bus_(bus),
        options_(options),
        stopping_(stopping),
        events_(prometheus::BuildCounter()
                    .Name("wisp_gateway_committed_objects_total")
                    .Help("Stored objects sent to wisp-policy, by kind, event and result "
                          "(sent|retried|dropped)")
                    .Register(registry)),
        synced_(prometheus::BuildGauge()
                    .Name("wisp_gateway_watch_synced")
                    .Help("1 once the kind's first complete list has been sent to wisp-policy")
                    .Register(registry)
                    .Add({{"kind", kind_.Label()}})) {}

  void set_reflector(kube::Reflector* reflector) { reflector_ = reflector; }
  bool synced() const { return synced_.Value() > 0; }

  void OnAdd(const kube::Json& object) override { Send(ToCommitted(kind_, "ADDED", object)); }
  void OnUpdate(const kube::Json&, const kube::Json& object) override {
    Send(ToCommitted(kind_, "MODIFIED", object));
  }
  void OnDelete(const kube::Json& object) override { Send(ToCommitted(kind_, "DELETED", object)); }
  void OnSynced() override {
    if (reflector_ == nullptr) return;
    if (Send(ToSynced(kind_, reflector_->Objects()))) synced_.Set(1);
  }

 private:
  // True once wisp-policy took it; false when dropped or stopping.
  bool Send(const v1::CommittedObject& object) {
    static const auto logger = log::Get("cluster");
    auto backoff = options_.initial_backoff;
    for (int attempt = 0; !stopping_.load(); ++attempt) {
      auto reply = bus::Call<v1::CommitResult>(bus_, bus::subjects::kPolicyRecord, object,
                                               options_.send_timeout);
      if (reply.ok()) {
        Count(object, "sent");
        if (!reply->refused().empty()) {
          SPDLOG_LOGGER_WARN(logger, "{} {}/{} as stored is refused by wisp's rules: {}",
                             kind_.Label(), object.namespace_(), object.name(), reply->refused());
        }
        return true;
      }
      if (absl::IsInvalidArgument(reply.status())) {
        Count(object, "dropped");
        SPDLOG_LOGGER_ERROR(logger, "{} {} {}/{} dropped: {}", object.event(), kind_.Label(),
                            object.namespace_(), object.name(),
                            std::string(reply.status().message()));
        return false;
      }
      Count(object, "retried");
      if (attempt == 0 || backoff >= options_.max_backoff) {
        SPDLOG_LOGGER_WARN(logger, "{} {} {}/{}: wisp-policy did not take it ({}); retrying",
                           object.event(), kind_.Label(), object.namespace_(), object.name(),
                           std::string(reply.status().message()));
      }
      // Sleep in short steps so that Stop() is not held up by a long backoff.
      const auto until = std::chrono::steady_clock::now() + backoff;
      while (!stopping_.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    return false;
  }

  void Count(const v1::CommittedObject& object, const char* result) {
    events_.Add({{"kind", kind_.Label()}, {"event", object.event()}, {"result", result}})
        .Increment();
  }

  const WatchedKind kind_;
  bus::Requester& bus_;
  const CommittedObjectsOptions& options_;
  const std::atomic<bool>& stopping_;
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Gauge& synced_;
  kube::Reflector* reflector_ = nullptr;
};

CommittedObjects::CommittedObjects(kube::Client& client, bus::Requester& bus,
                                   prometheus::Registry& registry, CommittedObjectsOptions options)
    : client_(client), options_(std::move(options)) {
  for (const auto& kind : options_.kinds) {
    auto forwarder = std::make_unique<Forwarder>(kind, bus, registry, options_, stopping_);
    kube::ReflectorOptions ro = options_.reflector;
    ro.name = "watch " + kind.resource.plural + "." +
              (kind.resource.group.empty() ? "core" : kind.resource.group);
    auto reflector = std::make_unique<kube::Reflector>(client_, kind.resource, ro, *forwarder);
    forwarder->set_reflector(reflector.get());
    forwarders_.push_back(std::move(forwarder));
    reflectors_.push_back(std::move(reflector));
  }
}

CommittedObjects::~CommittedObjects() { Stop(); }

void CommittedObjects::Start() {
  stopping_ = false;
  for (auto& r : reflectors_) r->Start();
}

void CommittedObjects::Stop() {
  stopping_ = true;
  for (auto& r : reflectors_) r->RequestStop();  // all at once, not in turn
  for (auto& r : reflectors_) r->Stop();
}

bool CommittedObjects::Synced() const {
  return std::all_of(forwarders_.begin(), forwarders_.end(),
                     [](const auto& f) { return f->synced(); });
}

}  // namespace wisp::gateway::cluster
