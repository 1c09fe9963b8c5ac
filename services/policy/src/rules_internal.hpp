#pragma once
// Helpers shared by the rule implementations (not part of wisp_policy_lib's contract).
#include <string>
#include <vector>

#include "wisp/policy/rules.hpp"

namespace wisp::policy::internal {

std::string JoinCauses(const std::vector<std::string>& causes);

// A Pod labelled kubevirt.io=virt-launcher (from its facts): the pods the virt-launcher rule is
// for.
bool IsVirtLauncherPod(const AdmissionInput& in);

// A denial by `rule` carrying every cause.
Verdict Deny(std::string_view rule, const std::vector<std::string>& causes, int32_t code,
             std::string reason);
Verdict Outcome(std::string_view rule, std::string_view outcome);

// Kubernetes' projected serviceAccountToken rules (validation.go) plus wisp's policy limits for one
// token source at field `fld` ("spec.volumes[0].projected.sources[0].serviceAccountToken").
// `path_field` is where a missing path is reported (Kubernetes reports it on the projected volume).
void ValidateServiceAccountToken(const k8s::Json& token, const std::string& fld,
                                 const std::string& path_field, const Policy& policy,
                                 const std::string& ns, std::vector<std::string>& causes);

// Kubernetes ValidateLocalNonReservedPath plus AtomicWriter's length limits.
void ValidateTokenPath(const std::string& path, const std::string& fld,
                       std::vector<std::string>& causes);

// "<fld>: Forbidden: audience \"x\" is not allowed in namespace \"ns\" (allowed: \"a\")".
std::string AudienceForbidden(const std::string& fld, const std::string& audience,
                              const std::string& ns, const Policy& policy);

// The lifetime checks on an expirationSeconds value.
void ValidateLifetime(int64_t seconds, const std::string& fld, const Policy& policy,
                      std::vector<std::string>& causes);

std::string Index(const std::string& base, size_t i);

// Kubernetes' parsers.ParseImageName (distribution/reference ParseNormalizedNamed): "" when
// `image` is a valid image reference, else the error text, e.g. `couldn't parse image name "X":
// invalid reference format`.
std::string ImageNameError(const std::string& image);

}  // namespace wisp::policy::internal
