#pragma once
// AdmissionReview (admission.k8s.io/v1) request decoding and response encoding.
//
// Contract:
//   - ParseAdmissionReview never throws. Problems are InvalidArgument with a message that names the
//     field: "body is not valid JSON: ...", "apiVersion \"x\" is not admission.k8s.io/v1",
//     "kind \"x\" is not AdmissionReview", "request is missing", "request.uid is missing",
//     "request.kind.kind is missing", "request.object is not an object".
//   - EncodeAdmissionReview writes the same apiVersion and kind the request used, response.uid =
//     request.uid, and for a non-empty patch `patchType: JSONPatch` with the patch base64-encoded.
//     A denial carries status {code, reason, message}; warnings and audit annotations are copied.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(k8s::AdmissionReview review, k8s::ParseAdmissionReview(body));
//   k8s::AdmissionResponse resp{.uid = review.request.uid, .allowed = true, .patch = patch_json};
//   std::string out = k8s::EncodeAdmissionReview(review.api_version, resp);
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/k8s/json.hpp"

namespace wisp::k8s {

inline constexpr std::string_view kAdmissionApiVersion = "admission.k8s.io/v1";
inline constexpr std::string_view kAdmissionApiVersionBeta = "admission.k8s.io/v1beta1";
inline constexpr std::string_view kAdmissionReviewKind = "AdmissionReview";

struct GroupVersionKind {
  std::string group;
  std::string version;
  std::string kind;
  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
};

struct GroupVersionResource {
  std::string group;
  std::string version;
  std::string resource;
};

struct UserInfo {
  std::string username;
  std::string uid;
  std::vector<std::string> groups;
};

struct AdmissionRequest {
  std::string uid;
  GroupVersionKind kind;
  GroupVersionResource resource;
  std::string sub_resource;
  std::string operation;  // CREATE | UPDATE | DELETE | CONNECT
  std::string name;
  std::string namespace_;
  UserInfo user;
  Json object;      // null when absent (DELETE)
  Json old_object;  // null when absent (CREATE)
  bool dry_run = false;
};

struct AdmissionReview {
  std::string api_version;  // echoed in the response
  AdmissionRequest request;
};

struct AdmissionResponse {
  std::string uid;
  bool allowed = true;
  std::string patch;  // RFC 6902 JSON array text; empty = no patch
  std::vector<std::string> warnings;
  std::string message;  // status.message (denials; optional on allow)
  int32_t code = 0;     // status.code, 0 = omitted
  std::string reason;   // status.reason
  std::map<std::string, std::string> audit_annotations;
};

absl::StatusOr<AdmissionReview> ParseAdmissionReview(std::string_view body);
std::string EncodeAdmissionReview(std::string_view api_version, const AdmissionResponse& response);
// The same answer built as a nlohmann Json tree and dumped: what EncodeAdmissionReview falls back
// to for text that is not valid UTF-8 (it throws Json::type_error 316 then, as nlohmann does), and
// the reference its bytes must equal (admission_review_test compares them). Slower; not for the
// serving path.
std::string EncodeAdmissionReviewWithJson(std::string_view api_version,
                                          const AdmissionResponse& response);

}  // namespace wisp::k8s
