#include "admit.hpp"

#include <cctype>
#include <iostream>
#include <array>
#include <map>
#include <random>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "cli.hpp"
#include "wisp/policy/rules.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::wispctl {
namespace {

using k8s::Json;

Json FromYaml(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(FromYaml(item));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = FromYaml(kv.second);
      return out;
    }
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& s = node.Scalar();
  if (node.Tag() != "?") return s;  // quoted or explicitly tagged: a string
  if (s == "null" || s == "Null" || s == "NULL" || s == "~" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  Json number = Json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (number.is_number() && s.find_first_not_of("+-0123456789.eE") == std::string::npos &&
      s[0] != '+' && !(s.size() > 1 && s[0] == '0' && s[1] != '.')) {
    return number;
  }
  return s;
}

void EmitYaml(YAML::Emitter& out, const Json& v) {
  if (v.is_object()) {
    out << YAML::BeginMap;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out << YAML::Key << it.key() << YAML::Value;
      EmitYaml(out, *it);
    }
    out << YAML::EndMap;
  } else if (v.is_array()) {
    out << YAML::BeginSeq;
    for (const auto& item : v) EmitYaml(out, item);
    out << YAML::EndSeq;
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    // Keep strings that would read back as another type ("true", "3600", "") quoted.
    bool ambiguous = true;
    try {
      YAML::Node probe = YAML::Load(s.empty() ? "''" : s);
      ambiguous = s.empty() || !probe.IsScalar() || FromYaml(probe) != Json(s);
    } catch (const YAML::Exception&) {
      ambiguous = true;  // does not even parse as plain YAML: quote it
    }
    // YAML 1.1 readers (PyYAML, kubectl's go-yaml) also read "0600" as an octal number and
    // "yes"/"off" as booleans: quote anything numeric-looking and those words too.
    if (!ambiguous && !s.empty()) {
      const bool numeric =
          (std::isdigit(static_cast<unsigned char>(s[0])) ||
           ((s[0] == '-' || s[0] == '+' || s[0] == '.') && s.size() > 1)) &&
          s.find_first_not_of("+-0123456789._:eExXoObBaAcCdDfF") == std::string::npos;
      std::string lower = s;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      ambiguous = numeric || lower == "yes" || lower == "no" || lower == "on" || lower == "off" ||
                  lower == "y" || lower == "n";
    }
    if (ambiguous) out << YAML::DoubleQuoted;
    out << s;
  } else if (v.is_boolean()) {
    out << (v.get<bool>() ? "true" : "false");
  } else if (v.is_null()) {
    out << YAML::Null;
  } else {
    out << v.dump();
  }
}

std::string Group(const std::string& api_version) {
  auto slash = api_version.find('/');
  return slash == std::string::npos ? "" : api_version.substr(0, slash);
}

std::string Version(const std::string& api_version) {
  auto slash = api_version.find('/');
  return slash == std::string::npos ? api_version : api_version.substr(slash + 1);
}

// A random RFC 4122 version 4 UUID, as the apiserver gives every stored object.
std::string NewUid() {
  std::random_device rd;
  std::array<uint8_t, 16> b{};
  for (auto& x : b) x = static_cast<uint8_t>(rd());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[b[i] >> 4]);
    out.push_back(kHex[b[i] & 0xf]);
  }
  return out;
}

constexpr const char* kAdmitHelp =
    "Runs each document of FILE through wisp's admission rules and prints the verdict, the "
    "warnings, the RFC 6902 patch and the mutated object as YAML. Without --bus the rules run "
    "locally from --policy-file; with --bus they run in wisp-policy over NATS. wispctl stands in "
    "for the apiserver: unless --dry-run, each allowed PersistentVolumeClaim, DataVolume or "
    "VolumeImportSource is then committed (wisp.v1.policy.record with --bus, as the gateway's "
    "watch reports a stored object; an in-memory store for this run without), so later "
    "documents see it; a Pod's call carries the annotations of its ServiceAccount when an earlier "
    "document of FILE is that ServiceAccount (as the gateway reads it from the apiserver). Exit "
    "status: 0 every document allowed, 1 a document was denied or "
    "failed, 2 bad usage.";

}  // namespace

absl::StatusOr<std::vector<Json>> ParseManifests(const std::string& text) {
  std::vector<Json> docs;
  try {
    for (const auto& node : YAML::LoadAll(text)) {
      if (node.IsNull()) continue;
      Json doc = FromYaml(node);
      if (!doc.is_object()) {
        return absl::InvalidArgumentError("document " + std::to_string(docs.size() + 1) +
                                          " is not a mapping");
      }
      docs.push_back(std::move(doc));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(std::string("not valid YAML: ") + e.what());
  }
  if (docs.empty()) return absl::InvalidArgumentError("no documents");
  return docs;
}

std::string ToYaml(const Json& value) {
  YAML::Emitter out;
  EmitYaml(out, value);
  return std::string(out.c_str()) + "\n";
}

AdmitResult AdmitManifests(const std::vector<Json>& manifests, const AdmitOptions& options,
                           const Decider& decide, const Committer& commit) {
  AdmitResult result;
  std::ostringstream out;
  // ServiceAccounts of the documents so far ("<ns>/<name>" -> annotations): a later pod's
  // AdmissionCall carries its ServiceAccount's, as the gateway reads them from the apiserver.
  std::map<std::string, std::map<std::string, std::string>> service_accounts;
  for (size_t i = 0; i < manifests.size(); ++i) {
    const Json& doc = manifests[i];
    const std::string api_version = k8s::GetString(doc, {"apiVersion"});
    const std::string kind = k8s::GetString(doc, {"kind"});
    const std::string name = k8s::GetString(doc, {"metadata", "name"});
    const std::string ns =
        k8s::GetString(doc, {"metadata", "namespace"}, options.default_namespace);
    v1::AdmissionCall call;
    call.set_uid("wispctl-" + std::to_string(i + 1));
    call.mutable_kind()->set_group(Group(api_version));
    call.mutable_kind()->set_version(Version(api_version));
    call.mutable_kind()->set_kind(kind);
    call.set_operation(options.operation);
    call.set_namespace_(ns);
    call.set_name(name);
    call.mutable_user()->set_username("wispctl");
    call.set_object_json(doc.dump());
    if (options.operation == "UPDATE") call.set_old_object_json(doc.dump());
    call.set_dry_run(options.dry_run);
    call.set_server_version(options.kubernetes_version);
    if (call.kind().group().empty() && kind == "ServiceAccount") {
      auto& annotations = service_accounts[ns + "/" + name];
      annotations.clear();
      if (const Json* a = k8s::Find(doc, {"metadata", "annotations"}); a && a->is_object()) {
        for (const auto& [k, v] : a->items()) {
          if (v.is_string()) annotations[k] = v.get<std::string>();
        }
      }
    }
    if (call.kind().group().empty() && kind == "Pod") {
      const std::string sa = k8s::GetString(doc, {"spec", "serviceAccountName"}, "default");
      if (auto it = service_accounts.find(ns + "/" + sa); it != service_accounts.end()) {
        call.set_service_account_found(true);
        for (const auto& [k, v] : it->second) (*call.mutable_service_account_annotations())[k] = v;
      }
    }

    Json report = {
        {"document", i + 1}, {"kind", api_version + " " + kind}, {"name", ns + "/" + name}};
    Json object = doc;
    Json patch = Json::array();
    Json warnings = Json::array();
    Json audit = Json::object();
    bool allowed = true;
    auto run = [&](bool mutate) -> bool {
      auto verdict = decide(call, mutate);
      const char* step = mutate ? "mutate" : "validate";
      if (!verdict.ok()) {
        report[step] = {{"error", std::string(verdict.status().message())}};
        allowed = false;
        return false;
      }
      for (const auto& w : verdict->warnings()) warnings.push_back(w);
      for (const auto& [k, v] : verdict->audit_annotations()) audit[k] = v;
      Json step_report = {{"allowed", verdict->allowed()}};
      if (!verdict->message().empty()) step_report["message"] = verdict->message();
      if (!verdict->allowed()) {
        step_report["code"] = verdict->code();
        allowed = false;
      }
      Json rules = Json::object();
      for (const auto& [rule, outcome] : verdict->rule_outcomes()) rules[rule] = outcome;
      step_report["rules"] = rules;
      report[step] = step_report;
      if (verdict->allowed() && !verdict->patch().empty()) {
        auto p = k8s::ParseJson(verdict->patch(), "patch");
        auto applied = p.ok() ? k8s::ApplyPatch(object, *p) : p.status();
        if (!applied.ok()) {
          report[step]["error"] =
              "the patch does not apply: " + std::string(applied.status().message());
          allowed = false;
          return false;
        }
        for (const auto& op : *p) patch.push_back(op);
        object = *applied;
        call.set_object_json(object.dump());
      }
      return verdict->allowed();
    };
    if (run(true) && options.validate) run(false);
    if (allowed && commit && !options.dry_run && policy::KeepsRecords(call.kind().group(), kind)) {
      // Stored as the apiserver would: a uid and the namespace in metadata.
      Json stored = object;
      if (k8s::GetString(stored, {"metadata", "uid"}).empty()) {
        stored["metadata"]["uid"] = NewUid();
      }
      stored["metadata"]["namespace"] = ns;
      v1::CommittedObject committed;
      committed.set_event(options.operation == "UPDATE" ? "MODIFIED" : "ADDED");
      *committed.mutable_kind() = call.kind();
      committed.set_namespace_(ns);
      committed.set_name(name);
      committed.set_object_json(stored.dump());
      auto result = commit(committed);
      if (!result.ok()) {
        report["commit"] = {{"error", std::string(result.status().message())}};
        allowed = false;
      } else if (!result->refused().empty()) {
        report["commit"] = {{"refused", result->refused()}};
      } else {
        report["commit"] = {{"recordWrites", result->writes()}};
      }
    }
    report["allowed"] = allowed;
    if (!warnings.empty()) report["warnings"] = warnings;
    if (!audit.empty()) report["auditAnnotations"] = audit;
    report["patch"] = patch;
    out << "# verdict\n" << ToYaml(report);
    if (allowed) out << "---\n" << ToYaml(object);
    if (i + 1 < manifests.size()) out << "---\n";
    result.all_allowed = result.all_allowed && allowed;
  }
  result.output = out.str();
  return result;
}

int RunAdmit(const std::vector<std::string>& args) {
  std::string file;
  std::string policy_file;
  bool use_bus = false;
  AdmitOptions options;
  Connection connection;
  config::Flags flags("wispctl admit", "run manifests through wisp's admission rules");
  flags.Description(kAdmitHelp);
  flags.String("file", &file,
               "Manifest file (YAML or JSON, several documents allowed); - is stdin. Also -f.");
  flags.Env("WISPCTL_ADMIT_FILE");
  flags.Enum("operation", &options.operation, {"CREATE", "UPDATE"}, "Admission operation.");
  flags.Bool("validate", &options.validate, "Also run the validating rules on the mutated object.");
  flags.String("namespace", &options.default_namespace,
               "Namespace for documents without metadata.namespace.");
  flags.String("policy-file", &policy_file, "Rules file for local evaluation (default built-in).");
  flags.Bool("bus", &use_bus, "Ask wisp-policy over NATS instead of evaluating locally.");
  flags.String("kubernetes-version", &options.kubernetes_version,
               "Cluster version the native-sidecar choice sees (major.minor).");
  flags.Bool("dry-run", &options.dry_run, "Mark calls dryRun (wisp-policy records nothing).");
  AddConnectionFlags(flags, connection);
  // Flags spells options --name; accept kubectl's -f FILE / -f=FILE too.
  std::vector<std::string> argv;
  for (const auto& a : args) {
    if (a == "-f") {
      argv.push_back("--file");
    } else if (a.rfind("-f=", 0) == 0) {
      argv.push_back("--file=" + a.substr(3));
    } else {
      argv.push_back(a);
    }
  }
  int exit_code = 0;
  if (!ParseCommand(flags, "admit", argv, exit_code)) return exit_code;
  if (file.empty()) {
    std::cerr << "wispctl admit: --file (-f): required\n";
    return 2;
  }
  auto input = ReadInput(file);
  if (!input.ok()) {
    std::cerr << "wispctl admit: --file: cannot read " << input.status().message() << "\n";
    return 2;
  }
  auto manifests = ParseManifests(*input);
  if (!manifests.ok()) {
    std::cerr << "wispctl admit: " << file << ": " << manifests.status().message() << "\n";
    return 2;
  }
  AdmitResult result;
  if (use_bus) {
    auto bus = Connect(connection);
    if (!bus.ok()) {
      std::cerr << "wispctl admit: " << bus.status().message() << "\n";
      return 1;
    }
    result = AdmitManifests(
        *manifests, options,
        [&](const v1::AdmissionCall& call, bool mutate) {
          return bus::Call<v1::AdmissionVerdict>(
              **bus, mutate ? bus::subjects::kPolicyMutate : bus::subjects::kPolicyValidate, call,
              connection.timeout);
        },
        [&](const v1::CommittedObject& object) {
          return bus::Call<v1::CommitResult>(**bus, bus::subjects::kPolicyRecord, object,
                                             connection.timeout);
        });
  } else {
    auto policy =
        policy_file.empty() ? policy::ParsePolicyYaml("") : policy::LoadPolicyFile(policy_file);
    if (!policy.ok()) {
      std::cerr << "wispctl admit: --policy-file: " << policy.status().message() << "\n";
      return 2;
    }
    // Records live only for this run, so later documents see earlier ones.
    std::map<std::string, std::string> records;
    policy::RecordLookup lookup =
        [&](std::string_view bucket,
            std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
      auto it = records.find(std::string(bucket) + "/" + std::string(key));
      if (it == records.end()) return std::optional<std::string>();
      return std::optional(it->second);
    };
    auto decide = [&](const v1::AdmissionCall& call,
                      bool mutate) -> absl::StatusOr<v1::AdmissionVerdict> {
      WISP_ASSIGN_OR_RETURN(policy::AdmissionInput in, policy::AdmissionInput::FromCall(call));
      policy::Verdict v = mutate ? policy::EvaluateMutate(in, *policy, lookup)
                                 : policy::EvaluateValidate(in, *policy, lookup);
      if (!v.error.ok()) return v.error;
      return policy::ToProto(v);
    };
    auto commit = [&](const v1::CommittedObject& object) -> absl::StatusOr<v1::CommitResult> {
      WISP_ASSIGN_OR_RETURN(policy::CommitOutcome outcome,
                            policy::EvaluateCommitted(object, *policy, lookup, 0));
      if (!outcome.error.ok()) return outcome.error;
      v1::CommitResult result;
      result.set_refused(outcome.refused);
      for (const auto& w : outcome.writes) {
        const std::string k = w.bucket + "/" + w.key;
        if (w.erase) {
          records.erase(k);
        } else {
          records[k] = w.value;
        }
        result.set_writes(result.writes() + 1);
      }
      return result;
    };
    result = AdmitManifests(*manifests, options, decide, commit);
  }
  std::cout << result.output;
  return result.all_allowed ? 0 : 1;
}

}  // namespace wisp::wispctl
