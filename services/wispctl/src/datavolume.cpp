#include "datavolume.hpp"

#include <chrono>
#include <iostream>
#include <thread>

#include "cli.hpp"
#include "upload.hpp"
#include "volume.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/kube/client.hpp"
#include "wisp/kube/config.hpp"

namespace wisp::wispctl {
namespace {

using Json = nlohmann::json;

// Must match services/gateway/src/cluster/populate_plan.hpp (kUploadVolumeAnnotation).
constexpr std::string_view kUploadVolumeAnnotation = "wisp.dev/upload-volume-id";

constexpr const char* kUsage = R"(NAME
    wispctl datavolume - work with CDI DataVolumes that wisp's DataVolume controller serves

SYNOPSIS
    wispctl datavolume upload NAMESPACE/NAME FILE [OPTIONS]

SUBCOMMANDS
    upload     upload a local image into a DataVolume with spec.source.upload

    `wispctl datavolume upload --help` documents its options.
)";

std::string ConditionMessage(const Json& dv, const std::string& type) {
  for (const auto& c : k8s::GetArray(dv, {"status", "conditions"})) {
    if (k8s::GetString(c, {"type"}) == type) return k8s::GetString(c, {"message"});
  }
  return "";
}

std::string What(const Json& dv) {
  return "DataVolume " + k8s::GetString(dv, {"metadata", "namespace"}) + "/" +
         k8s::GetString(dv, {"metadata", "name"});
}

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<kube::ClientPtr> KubeClient(std::string kubeconfig, const std::string& context,
                                           std::string& default_namespace) {
  if (kubeconfig.empty() && !context.empty()) {
    // A context names an entry of a kubeconfig: $KUBECONFIG's first file, else ~/.kube/config.
    const char* env = std::getenv("KUBECONFIG");
    const char* home = std::getenv("HOME");
    kubeconfig = env != nullptr && *env != '\0'
                     ? std::string(env).substr(0, std::string(env).find(':'))
                     : std::string(home != nullptr ? home : "") + "/.kube/config";
  }
  absl::StatusOr<kube::Config> config =
      kubeconfig.empty() ? kube::LoadFromEnvironment() : kube::LoadKubeconfig(kubeconfig, context);
  if (!config.ok()) return config.status();
  default_namespace = config->default_namespace;
  kube::ClientOptions options;
  options.user_agent = "wispctl/" WISP_VERSION;
  options.request_timeout = std::chrono::seconds(15);
  return kube::NewClient(*config, options);
}

}  // namespace

absl::StatusOr<std::string> UploadVolumeOf(const Json& dv) {
  const std::string what = What(dv);
  const Json* source = k8s::Find(dv, {"spec", "source"});
  if (source == nullptr || !source->is_object() || k8s::Find(*source, {"upload"}) == nullptr) {
    std::string kind = source != nullptr && source->is_object() && !source->empty()
                           ? "source." + source->begin().key()
                           : "no spec.source";
    return absl::FailedPreconditionError(what + " is not an upload DataVolume (it has " + kind +
                                         ", not spec.source.upload)");
  }
  const std::string phase = k8s::GetString(dv, {"status", "phase"});
  if (phase == "Succeeded") {
    return absl::FailedPreconditionError(what + " is Succeeded already: it holds its upload");
  }
  if (phase == "Failed") {
    return absl::FailedPreconditionError(what + " is Failed: " + ConditionMessage(dv, "Ready"));
  }
  const std::string id = k8s::FindAnnotation(dv, kUploadVolumeAnnotation).value_or("");
  if (phase != "UploadReady" || id.empty()) {
    std::string why = ConditionMessage(dv, "Running");
    if (why.empty()) why = ConditionMessage(dv, "Bound");
    return absl::UnavailableError(what + " is " + (phase.empty() ? "without a phase" : phase) +
                                  ", not UploadReady yet" + (why.empty() ? "" : ": " + why));
  }
  return id;
}

absl::StatusOr<std::pair<std::string, std::string>> ParseNamespacedName(
    const std::string& ref, const std::string& default_namespace) {
  const size_t slash = ref.find('/');
  std::string ns = slash == std::string::npos ? default_namespace : ref.substr(0, slash);
  std::string name = slash == std::string::npos ? ref : ref.substr(slash + 1);
  if (ns.empty() || name.empty() || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError("DATAVOLUME: \"" + ref +
                                      "\" is not NAMESPACE/NAME (or NAME with --namespace)");
  }
  return std::make_pair(ns, name);
}

namespace {

int RunDataVolumeUpload(const std::vector<std::string>& args) {
  const std::string command = "wispctl datavolume upload";
  Connection connection;
  UploadOptions options;
  std::string kubeconfig, context, namespace_;
  std::chrono::milliseconds wait = std::chrono::minutes(5);
  config::Flags flags(command, "upload a local image into a DataVolume with spec.source.upload");
  flags.Description(
      "Uploads FILE (raw or qcow2, optionally gz/xz/zst compressed: detected by content) into "
      "the CDI DataVolume NAMESPACE/NAME, whose spec.source is upload: {}. Reads the "
      "DataVolume from the apiserver (only `get datavolumes` is needed there), waits until "
      "wisp's DataVolume controller made it UploadReady and annotated it with the id of its "
      "upload volume (wisp.dev/upload-volume-id), then uploads as `wispctl volume upload` does: "
      "an upload token from wisp-token over NATS (granted to wispctl's NATS user only), an "
      "HTTPS PUT to the gateway's /v1/upload/<volume id>. Then waits until the DataVolume is "
      "Succeeded (its PVC bound to the uploaded volume) and exits 0. A failed upload (a bad "
      "image, a checksum mismatch, a lost connection) binds nothing: the DataVolume stays "
      "UploadReady, and the same command may be run again.");
  flags.Examples(
      "  wispctl datavolume upload vms/fedora ./fedora.qcow2\n"
      "  wispctl datavolume upload fedora --namespace vms --file fedora.raw.xz --sha256 <hex>");
  AddConnectionFlags(flags, connection);
  AddUploadFlags(flags, options);
  flags.String("kubeconfig", &kubeconfig,
               "kubeconfig file (default: $KUBECONFIG, else in-cluster, else ~/.kube/config).");
  flags.String("kube-context", &context, "The kubeconfig's context (default: current-context).");
  flags.String("namespace", &namespace_,
               "The DataVolume's namespace when DATAVOLUME is a bare NAME (default: the "
               "kubeconfig context's).");
  flags.Duration("wait", &wait,
                 "How long to wait for the DataVolume to be UploadReady before the upload, and "
                 "Succeeded after it (0: do not wait for Succeeded).");
  int code = 0;
  if (!ParseCommand(flags, command, args, code)) return code;
  const auto& pos = flags.Positional();
  if (auto st = TakeFileArgument(pos, options, "NAMESPACE/NAME"); !st.ok()) {
    return Fail(command, st);
  }
  std::string default_namespace;
  auto kube = KubeClient(kubeconfig, context, default_namespace);
  if (!kube.ok()) return Fail(command, kube.status());
  auto ref = ParseNamespacedName(pos[0], namespace_.empty() ? default_namespace : namespace_);
  if (!ref.ok()) return Fail(command, ref.status());
  const auto& [ns, name] = *ref;

  auto get = [&]() { return (*kube)->Get(kube::kDataVolumes, ns, name); };
  const auto ready_by = std::chrono::steady_clock::now() + wait;
  std::string volume_id;
  for (bool said = false;; said = true) {
    auto dv = get();
    if (!dv.ok()) return Fail(command, dv.status());
    auto id = UploadVolumeOf(*dv);
    if (id.ok()) {
      volume_id = *id;
      break;
    }
    if (!absl::IsUnavailable(id.status()) || std::chrono::steady_clock::now() >= ready_by) {
      return Fail(command, id.status());
    }
    if (!said) std::cerr << id.status().message() << "; waiting\n";
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  auto bus = Connect(connection);
  if (!bus.ok()) return Fail(command, bus.status());
  auto volume = GetVolumeByRef(**bus, volume_id, connection.timeout);
  if (!volume.ok()) return Fail(command, volume.status());
  options.name = name;
  options.namespace_ = ns;
  std::cerr << "DataVolume " << ns << "/" << name << " is UploadReady\n";
  code = UploadToVolume(**bus, connection, *volume, options, command);
  if (code != 0 || wait.count() == 0) return code;

  // The volume holds the image; wisp's controllers hand its PV to the DataVolume's PVC once
  // external-provisioner's CreateVolume (retried with backoff) returns it.
  const auto bound_by = std::chrono::steady_clock::now() + wait;
  std::string phase;
  while (true) {
    auto dv = get();
    if (!dv.ok()) return Fail(command, dv.status());
    phase = k8s::GetString(*dv, {"status", "phase"});
    if (phase == "Succeeded") {
      std::cout << "DataVolume " << ns << "/" << name << " Succeeded: PVC "
                << k8s::GetString(*dv, {"status", "claimName"}) << " holds the upload\n";
      return 0;
    }
    if (phase == "Failed") {
      std::cerr << command << ": DataVolume " << ns << "/" << name
                << " Failed: " << ConditionMessage(*dv, "Ready") << "\n";
      return 1;
    }
    if (std::chrono::steady_clock::now() >= bound_by) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::cerr << command << ": the upload is in volume " << volume_id << ", but DataVolume " << ns
            << "/" << name << " is still " << phase << " after " << config::FormatDuration(wait)
            << " (its PVC binds once external-provisioner retries CreateVolume)\n";
  return 1;
}

}  // namespace

int RunDataVolume(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "upload") return RunDataVolumeUpload(rest);
  std::cerr << "wispctl datavolume: unknown subcommand \"" << sub << "\" (upload)\n";
  return 2;
}

}  // namespace wisp::wispctl
