#include "volume_service.hpp"

#include <charconv>
#include <filesystem>
#include <thread>

#include "checksum.hpp"
#include "http_source.hpp"
#include "progress.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/formats/image_formats.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::populator {
namespace {

namespace subjects = bus::subjects;

const std::string* Param(const v1::VolumeSpec& spec, const char* key) {
  auto it = spec.parameters().find(key);
  return it == spec.parameters().end() || it->second.empty() ? nullptr : &it->second;
}

std::string SourceKindName(const v1::PopulationSource& s) {
  switch (s.kind_case()) {
    case v1::PopulationSource::kHttp:
      return "http " + s.http().url();
    case v1::PopulationSource::kBlank:
      return "blank";
    case v1::PopulationSource::kClone:
      return "clone of " + s.clone().volume_id();
    case v1::PopulationSource::kUpload:
      return "upload";
    default:
      return "none";
  }
}

bool SameSource(const v1::PopulationSource& a, const v1::PopulationSource& b) {
  return SourceKindName(a) == SourceKindName(b) && a.format() == b.format() &&
         a.sha256() == b.sha256();
}

}  // namespace

absl::Status ValidateNodeName(std::string_view node, std::string_view field) {
  if (node.empty()) return absl::InvalidArgumentError(std::string(field) + ": required");
  for (char c : node) {
    if (c <= ' ' || c == '*' || c == '>' || c == 0x7f) {
      return absl::InvalidArgumentError(std::string(field) + ": \"" + std::string(node) +
                                        "\" is not a valid node name");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateVolumeId(std::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("volume_id: required");
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
      return absl::InvalidArgumentError("volume_id: \"" + std::string(id) +
                                        "\" is not a wisp volume id");
    }
  }
  return absl::OkStatus();
}

VolumeService::VolumeService(bus::Bus& bus, bus::KeyValue& volumes, bus::KeyValue& sources,
                             PopulatorMetrics& metrics, Clock& clock, VolumeServiceConfig config)
    : bus_(bus),
      sources_(sources),
      metrics_(metrics),
      clock_(clock),
      config_(std::move(config)),
      store_(volumes, bus, clock) {}

VolumeService::~VolumeService() { Drain(); }

absl::Status VolumeService::Serve(bus::Service* micro) {
  WISP_RETURN_IF_ERROR(ValidateNodeName(config_.node_name, "node-name"));
  auto serve = [&](std::string name, std::string subject,
                   bus::RequestHandler handler) -> absl::Status {
    if (micro != nullptr) {
      return micro->AddEndpoint(name, subject, bus::queues::kPopulator, std::move(handler));
    }
    WISP_ASSIGN_OR_RETURN(auto sub,
                          bus_.Serve(subject, bus::queues::kPopulator, std::move(handler)));
    subs_.push_back(std::move(sub));
    return absl::OkStatus();
  };
  for (bool node : {false, true}) {
    auto subject = [&](std::string_view general, const char* verb) {
      return node ? subjects::Node(config_.node_name, verb) : std::string(general);
    };
    std::string prefix = node ? "node-" : "";
    WISP_RETURN_IF_ERROR(serve(prefix + "create", subject(subjects::kVolumeCreate, "volume.create"),
                               [this](const bus::Request& r) { return HandleCreate(r); }));
    WISP_RETURN_IF_ERROR(serve(prefix + "get", subject(subjects::kVolumeGet, "volume.get"),
                               [this](const bus::Request& r) { return HandleGet(r); }));
    WISP_RETURN_IF_ERROR(
        serve(prefix + "delete", subject(subjects::kVolumeDelete, "volume.delete"),
              [this, node](const bus::Request& r) { return HandleDelete(r, node); }));
    WISP_RETURN_IF_ERROR(serve(prefix + "list", subject(subjects::kVolumeList, "volume.list"),
                               [this](const bus::Request& r) { return HandleList(r); }));
  }
  return absl::OkStatus();
}

void VolumeService::Drain() {
  for (auto& sub : subs_) (void)sub->Drain();
  subs_.clear();
}

namespace {

// The VolumeImportSources a PVC record's data_source_ref ("<apiGroup>/<kind>/<name>") may name,
// and the kind part of the key of their own records in wisp_sources ("<ns>.<kind>.<name>", as
// wisp-policy writes them: PopulationRecord in admission.proto).
struct ImportSourceRef {
  std::string_view prefix;
  std::string_view record_kind;
  std::string_view what;  // for messages
};
constexpr ImportSourceRef kImportSourceRefs[] = {
    {"wisp.dev/VolumeImportSource/", "VolumeImportSource", "VolumeImportSource"},
    {"cdi.kubevirt.io/VolumeImportSource/", "cdi.kubevirt.io.VolumeImportSource",
     "cdi.kubevirt.io VolumeImportSource"},
};

const ImportSourceRef* FindImportSourceRef(const std::string& data_source_ref) {
  for (const auto& ref : kImportSourceRefs) {
    if (data_source_ref.rfind(ref.prefix, 0) == 0) return &ref;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<v1::VolumeSpec> VolumeService::ResolveSpec(v1::VolumeSpec spec) {
  if (spec.name().empty()) return absl::InvalidArgumentError("spec.name: required");
  if (spec.capacity_bytes() <= 0) {
    return absl::InvalidArgumentError("spec.capacity_bytes: must be > 0");
  }
  if (spec.pvc_name().empty()) {
    if (auto* p = Param(spec, kParamPvcName)) spec.set_pvc_name(*p);
  }
  if (spec.pvc_namespace().empty()) {
    if (auto* p = Param(spec, kParamPvcNamespace)) spec.set_pvc_namespace(*p);
  }
  if (spec.node().empty()) spec.set_node(config_.node_name);
  WISP_RETURN_IF_ERROR(ValidateNodeName(spec.node(), "spec.node"));

  auto* source = spec.mutable_source();
  std::string origin = "spec.source";
  if (source->kind_case() == v1::PopulationSource::KIND_NOT_SET) {
    bool resolved = false;
    if (!spec.pvc_name().empty() && !spec.pvc_namespace().empty()) {
      for (const char* kind : {"PersistentVolumeClaim", "DataVolume"}) {
        std::string key = spec.pvc_namespace() + "." + kind + "." + spec.pvc_name();
        auto entry = sources_.Get(key);
        if (!entry.ok()) {
          if (entry.status().code() == absl::StatusCode::kNotFound) continue;
          return absl::UnavailableError("reading wisp_sources " + key + ": " +
                                        std::string(entry.status().message()));
        }
        v1::PopulationRecord record;
        if (!record.ParseFromString(entry->value)) {
          return absl::DataLossError("wisp_sources record " + key + " does not parse");
        }
        const ImportSourceRef* ref = FindImportSourceRef(record.data_source_ref());
        if (record.source().kind_case() == v1::PopulationSource::KIND_NOT_SET && ref != nullptr) {
          // The PVC was stored before the VolumeImportSource it names (KEP 1495 allows it):
          // the source is the VolumeImportSource's own record, once it exists.
          const std::string vis = record.data_source_ref().substr(ref->prefix.size());
          const std::string vis_key =
              spec.pvc_namespace() + "." + std::string(ref->record_kind) + "." + vis;
          auto vis_entry = sources_.Get(vis_key);
          if (absl::IsNotFound(vis_entry.status())) {
            return absl::UnavailableError(std::string(ref->what) + " " + spec.pvc_namespace() +
                                          "/" + vis + ", named by PVC " + spec.pvc_namespace() +
                                          "/" + spec.pvc_name() + ", does not exist yet; retry");
          }
          if (!vis_entry.ok()) {
            return absl::UnavailableError("reading wisp_sources " + vis_key + ": " +
                                          std::string(vis_entry.status().message()));
          }
          v1::PopulationRecord vis_record;
          if (!vis_record.ParseFromString(vis_entry->value)) {
            return absl::DataLossError("wisp_sources record " + vis_key + " does not parse");
          }
          *record.mutable_source() = vis_record.source();
          key = vis_key;
        }
        if (record.source().kind_case() != v1::PopulationSource::KIND_NOT_SET) {
          *source = record.source();
          origin = "wisp_sources " + key;
          resolved = true;
        } else if (!record.data_source_ref().empty()) {
          source->mutable_blank();
          spec.set_external_population(true);
          origin = "wisp_sources " + key;
          resolved = true;
        }
        if (resolved) break;
      }
    }
    if (!resolved) {
      if (auto* url = Param(spec, kParamSourceUrl)) {
        source->mutable_http()->set_url(*url);
        origin = kParamSourceUrl;
      } else if (auto* kind = Param(spec, kParamSource); kind && *kind == "blank") {
        source->mutable_blank();
      } else if (kind) {
        return absl::InvalidArgumentError(std::string(kParamSource) + ": \"" + *kind +
                                          "\" is not supported (blank, or set " + kParamSourceUrl +
                                          ")");
      } else if (!spec.pvc_name().empty()) {
        return absl::UnavailableError("no population record for PVC " + spec.pvc_namespace() + "/" +
                                      spec.pvc_name() +
                                      " in wisp_sources yet and no StorageClass source; retry");
      } else {
        source->mutable_blank();
      }
    }
    if (source->format().empty()) {
      if (auto* f = Param(spec, kParamSourceFormat)) source->set_format(*f);
    }
    if (source->sha256().empty()) {
      if (auto* s = Param(spec, kParamSha256)) source->set_sha256(*s);
    }
  }
  const std::string& format = source->format();
  if (!format.empty() && !formats::IsDiskFormat(format)) {
    return absl::InvalidArgumentError(std::string(kParamSourceFormat) + ": \"" + format +
                                      "\" is not supported (" + formats::PlainList() +
                                      "; compression is detected)");
  }
  if (!source->sha256().empty()) {
    WISP_ASSIGN_OR_RETURN(std::string sha, NormalizeSha256(source->sha256(), kParamSha256));
    source->set_sha256(sha);
  }
  switch (source->kind_case()) {
    case v1::PopulationSource::kHttp: {
      std::string field = origin == "spec.source" ? "spec.source.http.url" : origin;
      if (origin == kParamSourceUrl) field = kParamSourceUrl;
      auto url = ParseUrl(source->http().url(), field);
      if (!url.ok()) return url.status();
      // A record written before wisp refused secretRef (or by a caller of its own): never
      // imported without the credentials it names, and the credentials are never fetched here.
      if (!source->http().secret_ref().empty()) {
        return absl::InvalidArgumentError(
            origin + ": spec.source.http.secretRef: Unsupported value: \"" +
            source->http().secret_ref() +
            "\": wisp-populator does not fetch with credentials from Secrets: an import's source "
            "is stored in JetStream (wisp_sources, the populate job stream), where a Secret's "
            "values must not go");
      }
      // certConfigMap: the bundle comes with the request (the gateway read the ConfigMap);
      // without it the import would verify against the system roots alone, which is not what
      // the source asked for.
      if (const std::string& cm = source->http().cert_config_map(); !cm.empty()) {
        if (spec.source_ca().config_map() != cm || spec.source_ca().ca_pem().empty()) {
          return absl::FailedPreconditionError(
              origin + ": spec.source.http.certConfigMap: the CA bundle of ConfigMap " +
              spec.pvc_namespace() + "/" + cm +
              " did not come with the create request (wisp-gateway's CSI controller reads it "
              "from the apiserver: it needs --in-cluster or --kubeconfig)");
        }
        source->mutable_http()->set_ca_pem(spec.source_ca().ca_pem());
      }
      break;
    }
    case v1::PopulationSource::kClone: {
      auto* clone = source->mutable_clone();
      std::string src_id = clone->volume_id();
      if (src_id.empty() && !clone->name().empty()) src_id = VolumeIdForName(clone->name());
      if (src_id.empty())
        return absl::InvalidArgumentError("spec.source.clone.volume_id: required");
      WISP_RETURN_IF_ERROR(ValidateVolumeId(src_id));
      if (!clone->namespace_().empty() && clone->namespace_() != spec.pvc_namespace()) {
        return absl::InvalidArgumentError(
            "cross-namespace clone is not supported: source namespace \"" + clone->namespace_() +
            "\", target namespace \"" + spec.pvc_namespace() + "\"");
      }
      auto src = store_.Get(src_id);
      if (!src.ok()) {
        if (src.status().code() == absl::StatusCode::kNotFound) {
          return absl::NotFoundError("clone source volume " + src_id + " not found");
        }
        return src.status();
      }
      const v1::VolumeStatus& s = src->first;
      if (s.spec().pvc_namespace() != spec.pvc_namespace()) {
        return absl::InvalidArgumentError("cross-namespace clone is not supported: source volume " +
                                          src_id + " is in namespace \"" +
                                          s.spec().pvc_namespace() + "\", target in \"" +
                                          spec.pvc_namespace() + "\"");
      }
      if (s.phase() != v1::SUCCEEDED) {
        return absl::UnavailableError("clone source volume " + src_id + " is not ready (phase " +
                                      v1::VolumePhase_Name(s.phase()) + ")");
      }
      if (s.spec().capacity_bytes() > spec.capacity_bytes()) {
        return absl::OutOfRangeError(
            "clone source volume " + src_id + " has " + std::to_string(s.spec().capacity_bytes()) +
            " bytes, more than the requested capacity of " + std::to_string(spec.capacity_bytes()));
      }
      clone->set_volume_id(src_id);
      // The bytes are node-local: the clone is made where the source is.
      spec.set_node(s.spec().node());
      break;
    }
    case v1::PopulationSource::kBlank:
    case v1::PopulationSource::kUpload:
      break;
    default:
      return absl::InvalidArgumentError("spec.source: unknown source kind");
  }
  spec.clear_source_ca();  // in source.http.ca_pem when it was wanted
  return spec;
}

absl::Status VolumeService::PublishJob(const v1::VolumeStatus& status, const v1::VolumeSpec& spec) {
  v1::PopulateJob job;
  job.set_volume_id(status.volume_id());
  *job.mutable_spec() = spec;  // with header values: the node needs them to fetch
  std::string body;
  job.SerializeToString(&body);
  // The id de-duplicates retries of one create; the creation time keeps a volume deleted and
  // created again inside the duplicate window from losing its job.
  auto seq = bus_.Js().Publish(
      subjects::PopulateJobs(spec.node()), body, {},
      "populate-" + status.volume_id() + "-" + std::to_string(status.created_unix()));
  if (!seq.ok()) {
    return absl::UnavailableError("queueing the population job: " +
                                  std::string(seq.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::VolumeStatus> VolumeService::Create(const v1::CreateVolumeRequest& request,
                                                       const bus::Request* wait_for) {
  WISP_ASSIGN_OR_RETURN(v1::VolumeSpec spec, ResolveSpec(request.spec()));
  const std::string id = VolumeIdForName(spec.name());
  auto log = log::Get("volume");
  log::ScopedRequestId rid(id);

  v1::VolumeStatus fresh;
  fresh.set_volume_id(id);
  *fresh.mutable_spec() = spec;
  fresh.set_phase(v1::PENDING);
  fresh.set_progress(kProgressUnknown);
  fresh.set_path(config_.volume_root + "/" + id);
  if (spec.source().has_upload()) {
    // Nothing to queue: the bytes arrive through the gateway (UploadService).
    fresh.set_phase(v1::UPLOAD_READY);
    fresh.set_message("waiting for an upload: wispctl volume upload " + spec.name() +
                      " FILE, or PUT /v1/upload/" + id + " on the gateway");
  }
  auto stored = store_.Create(Sanitized(fresh));
  absl::Status created = stored.status();
  v1::VolumeStatus current = stored.ok() ? *stored : Sanitized(fresh);
  if (absl::IsAlreadyExists(created)) {
    WISP_ASSIGN_OR_RETURN(auto existing, store_.Get(id));
    current = existing.first;
    if (current.spec().capacity_bytes() != spec.capacity_bytes()) {
      return absl::AlreadyExistsError("volume \"" + spec.name() +
                                      "\" already exists with capacity " +
                                      std::to_string(current.spec().capacity_bytes()) +
                                      " bytes, requested " + std::to_string(spec.capacity_bytes()));
    }
    if (!SameSource(current.spec().source(), spec.source())) {
      return absl::AlreadyExistsError("volume \"" + spec.name() +
                                      "\" already exists with a different source (" +
                                      SourceKindName(current.spec().source()) + ")");
    }
    if (current.phase() == v1::DELETING) {
      return absl::UnavailableError("volume \"" + spec.name() + "\" is being deleted; retry");
    }
  } else if (!created.ok()) {
    return absl::UnavailableError("writing wisp_volumes: " + std::string(created.message()));
  } else {
    SPDLOG_LOGGER_INFO(log, "volume {} created on node {}, source {}", spec.name(), spec.node(),
                       Sanitized(fresh).spec().source().has_http()
                           ? ParseUrl(spec.source().http().url())->Redacted()
                           : SourceKindName(spec.source()));
  }
  // PENDING means the job may not be queued yet (first call, or a crash in between): (re)queue it;
  // JetStream de-duplicates by Nats-Msg-Id.
  if (current.phase() == v1::PENDING && !spec.source().has_upload()) {
    WISP_RETURN_IF_ERROR(PublishJob(current, spec));
    WISP_ASSIGN_OR_RETURN(current, store_.Mutate(id, [](v1::VolumeStatus& s) {
      if (s.phase() != v1::PENDING) return false;
      s.set_phase(v1::IMPORT_SCHEDULED);
      return true;
    }));
  }
  if (wait_for != nullptr && request.wait()) {
    while (!IsTerminal(current.phase())) {
      auto left = wait_for->Remaining();
      if (left <= config_.wait_poll * 2) break;
      std::this_thread::sleep_for(config_.wait_poll);
      WISP_ASSIGN_OR_RETURN(auto again, store_.Get(id));
      current = std::move(again.first);
    }
  }
  return Sanitized(current);
}

bus::Reply VolumeService::HandleCreate(const bus::Request& request) {
  auto req = bus::ParseBody<v1::CreateVolumeRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  auto status = Create(*req, &request);
  if (!status.ok()) return bus::Reply::Error(status.status());
  v1::CreateVolumeResponse resp;
  *resp.mutable_volume() = std::move(*status);
  return bus::ProtoReply(resp);
}

bus::Reply VolumeService::HandleGet(const bus::Request& request) {
  auto req = bus::ParseBody<v1::GetVolumeRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  std::string id = req->volume_id();
  if (id.empty() && !req->name().empty()) id = VolumeIdForName(req->name());
  if (auto st = ValidateVolumeId(id); !st.ok()) return bus::Reply::Error(st);
  auto got = store_.Get(id);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) {
      return bus::Reply::Error(absl::NotFoundError(
          "volume " + (req->name().empty() ? id : "\"" + req->name() + "\"") + " not found"));
    }
    return bus::Reply::Error(got.status());
  }
  v1::GetVolumeResponse resp;
  *resp.mutable_volume() = Sanitized(got->first);
  return bus::ProtoReply(resp);
}

bus::Reply VolumeService::HandleList(const bus::Request& request) {
  auto req = bus::ParseBody<v1::ListVolumesRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  if (req->max_entries() < 0) {
    return bus::Reply::Error(absl::InvalidArgumentError("max_entries: must be >= 0"));
  }
  size_t start = 0;
  if (!req->starting_token().empty()) {
    // A token is exactly the decimal index this service issued: "12abc" or "-1" is not one.
    const std::string& token = req->starting_token();
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), start);
    if (ec != std::errc() || end != token.data() + token.size()) {
      return bus::Reply::Error(absl::AbortedError("starting_token: \"" + token +
                                                  "\" is not a token this service issued"));
    }
  }
  auto all = store_.List();
  if (!all.ok()) return bus::Reply::Error(all.status());
  if (start > all->size()) {
    return bus::Reply::Error(absl::AbortedError("starting_token: past the end of the list"));
  }
  v1::ListVolumesResponse resp;
  size_t end = all->size();
  if (req->max_entries() > 0) end = std::min(end, start + static_cast<size_t>(req->max_entries()));
  for (size_t i = start; i < end; ++i) *resp.add_volumes() = Sanitized((*all)[i]);
  if (end < all->size()) resp.set_next_token(std::to_string(end));
  return bus::ProtoReply(resp);
}

absl::Status VolumeService::DeleteLocal(const std::string& id) {
  std::error_code ec;
  std::filesystem::remove_all(config_.volume_root + "/" + id, ec);
  if (ec) return absl::InternalError("removing volume " + id + ": " + ec.message());
  metrics_.RemoveProgress(id);
  absl::Status st = store_.Delete(id);
  if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
  SPDLOG_LOGGER_INFO(log::Get("volume"), "volume {} deleted", id);
  return absl::OkStatus();
}

bus::Reply VolumeService::HandleDelete(const bus::Request& request, bool node_subject) {
  auto req = bus::ParseBody<v1::DeleteVolumeRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  const std::string& id = req->volume_id();
  if (auto st = ValidateVolumeId(id); !st.ok()) return bus::Reply::Error(st);
  auto marked = store_.Mutate(id, [](v1::VolumeStatus& s) {
    if (s.phase() == v1::DELETING) return false;
    s.set_phase(v1::DELETING);
    return true;
  });
  if (!marked.ok()) {
    // Deleting what is not there succeeds (CSI DeleteVolume is idempotent).
    if (marked.status().code() == absl::StatusCode::kNotFound) {
      return bus::ProtoReply(v1::DeleteVolumeResponse());
    }
    return bus::Reply::Error(marked.status());
  }
  const std::string& node = marked->spec().node();
  if (node_subject || node == config_.node_name || node.empty()) {
    if (auto st = DeleteLocal(id); !st.ok()) return bus::Reply::Error(st);
    return bus::ProtoReply(v1::DeleteVolumeResponse());
  }
  auto timeout = std::min(request.Remaining(), config_.forward_timeout);
  auto reply = bus_.Request(subjects::Node(node, "volume.delete"), request.msg.data, timeout);
  if (!reply.ok() && marked->node_lost() && bus::IsNoResponders(reply.status())) {
    // Failed because its node was lost (LostNodeSweeper), and that node still has no populator:
    // nothing can be removed there now. Drop the record; if the node comes back, its populator
    // finds the queued job's volume gone, removes the directory and acks the job (JobRunner).
    if (auto st = store_.Delete(id); !st.ok() && st.code() != absl::StatusCode::kNotFound) {
      return bus::Reply::Error(st);
    }
    SPDLOG_LOGGER_INFO(log::Get("volume"),
                       "volume {} deleted without its lost node {} (its directory there stays "
                       "until a populator runs on that node again)",
                       id, node);
    return bus::ProtoReply(v1::DeleteVolumeResponse());
  }
  if (!reply.ok()) {
    return bus::Reply::Error(
        absl::Status(reply.status().code(), "deleting volume " + id + " on node " + node + ": " +
                                                std::string(reply.status().message())));
  }
  return bus::ProtoReply(v1::DeleteVolumeResponse());
}

}  // namespace wisp::populator
