#pragma once
// wispctl admit: run manifests through wisp's admission rules and print what would happen.
//
//   wispctl admit -f FILE [--operation CREATE|UPDATE] [--validate] [--namespace NS]
//                 [--policy-file FILE | --bus] [--kubernetes-version X.Y] [--dry-run] [--json]
//
// Contract:
//   - FILE holds one or more YAML (or JSON) documents; each is admitted in order. Without --bus
//     the rules run in-process from --policy-file (default: built-in policy) with an in-memory
//     record store shared by the documents (a VolumeImportSource then its PVC). With --bus the
//     same AdmissionCall goes to wisp.v1.policy.* over NATS.
//   - The mutating rules always run; --validate also runs the validating rules on the mutated
//     object, as kube-apiserver does.
//   - wispctl stands in for the apiserver: an allowed document (not --dry-run) of a kind wisp keeps
//     records of (PVC, DataVolume, VolumeImportSource) is then committed, as the gateway's watch
//     reports a stored object (wisp.v1.policy.record with --bus; the in-memory store without), so
//     later documents see it (a PVC, then a DataVolume of its name).
//   - A Pod's AdmissionCall carries its ServiceAccount's annotations (service_account_annotations,
//     service_account_found) when an earlier document of FILE is that ServiceAccount, as the
//     gateway reads them from the apiserver; identity presets are then chosen per ServiceAccount.
//   - Output (YAML): per document a verdict (allowed, code, message, warnings, audit annotations,
//     the RFC 6902 patch) followed by the mutated object. Exit 0 when every document is allowed, 1
//     when one is denied or fails, 2 for bad usage or an unreadable file.
//
// Example:
//   wispctl admit -f loader-pod.yaml --kubernetes-version 1.30
#include <functional>
#include <string>
#include <vector>

#include "wisp/k8s/json.hpp"
#include "wisp/status/status.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::wispctl {

int RunAdmit(const std::vector<std::string>& args);

// YAML <-> JSON for manifests (plain scalars typed as YAML 1.2 core: null, bool, int, float).
absl::StatusOr<std::vector<k8s::Json>> ParseManifests(const std::string& text);
std::string ToYaml(const k8s::Json& value);

struct AdmitOptions {
  std::string operation = "CREATE";
  bool validate = false;
  std::string default_namespace = "default";
  std::string kubernetes_version = "1.30";
  bool dry_run = false;
};

// (call, mutate) -> verdict; the local PolicyService or the bus.
using Decider =
    std::function<absl::StatusOr<v1::AdmissionVerdict>(const v1::AdmissionCall&, bool mutate)>;

// The mutated object of an allowed document, stored: (event ADDED|MODIFIED) -> CommitResult.
using Committer = std::function<absl::StatusOr<v1::CommitResult>(const v1::CommittedObject&)>;

struct AdmitResult {
  std::string output;  // YAML
  bool all_allowed = true;
};

AdmitResult AdmitManifests(const std::vector<k8s::Json>& manifests, const AdmitOptions& options,
                           const Decider& decide, const Committer& commit = nullptr);

}  // namespace wisp::wispctl
