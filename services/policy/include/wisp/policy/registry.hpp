#pragma once
// The rule registry: every kind wisp admits and, for each, the rules that run on its mutate and
// validate paths, in order. It is the one place a rule or a kind is added: EvaluateMutate and
// EvaluateValidate run exactly what is listed here, and the gateway answers 400 for a kind that
// is not listed (IsAdmittedKind) without calling wisp-policy. A kind listed with admitted = false
// (CDI's VolumeImportSource) has no webhook: its validating rules run only on the objects the
// apiserver stored (EvaluateCommitted), and the gateway answers 400 for it as for any other.
//
// Contract:
//   - Kinds() is a constant table in src/registry.cpp; its order is the order of
//     AdmittedKindsText(), and each kind's rules run in the order listed.
//   - A rule is a pure function (rules.hpp): no I/O, records only through the RecordLookup.
//   - On the mutate path each rule sees the object as the rules before it left it: a rule whose
//     `needs_object` says so gets `AdmissionInput::object` (parsed if it was deferred) with the
//     earlier rules' patches applied; the others read the admitted pod's facts.
//   - Validate: the first denial wins and ends the path; mutate: patches are concatenated.
//
// Example:
//   if (!policy::IsAdmittedKind(gvk.group(), gvk.kind())) {
//     return BadRequest("not admitted by wisp (" + policy::AdmittedKindsText() + ")");
//   }
//   for (const policy::Rule& rule : policy::FindKind("", "Pod")->validate) ... rule.name ...
#include <span>
#include <string>
#include <string_view>

#include "wisp/policy/rules.hpp"

namespace wisp::policy {

using RuleFn = Verdict (*)(const AdmissionInput& in, const Policy& policy,
                           const RecordLookup& lookup);
// True when the rule will read `AdmissionInput::object` for this input (not only pod facts).
using NeedsObjectFn = bool (*)(const AdmissionInput& in, const Policy& policy);

struct Rule {
  std::string_view name;  // its kRule* constant: label `rule` of wisp_policy_rule_decisions_total
  RuleFn evaluate = nullptr;
  NeedsObjectFn needs_object = nullptr;  // nullptr: reads only facts, never the tree
  // What the rule reads, in the error that answers when the object cannot be prepared for it.
  std::string_view reads = "object";
};

struct KindRules {
  std::string_view group;    // "" for the core group
  std::string_view version;  // only for messages ("v1 Pod")
  std::string_view kind;
  std::span<const Rule> mutate;
  std::span<const Rule> validate;
  bool admitted = true;  // false: recorded from stored objects only, never admitted
};

// Every listed kind, in a fixed order.
std::span<const KindRules> Kinds();
// The entry for group/kind (admitted or not); nullptr when it is not listed.
const KindRules* FindKind(std::string_view group, std::string_view kind);
// Listed and admitted.
bool IsAdmittedKind(std::string_view group, std::string_view kind);
// "v1 Pod, v1 PersistentVolumeClaim, kubevirt.io VirtualMachineInstance, ...": the admitted
// kinds, core kinds by version, the others by group.
std::string AdmittedKindsText();

}  // namespace wisp::policy
