#pragma once
// AdmissionReview body -> the wisp.v1.policy.* call, on the hot path of every admission request.
//
// Contract: ParseReviewCall(body, v) accepts exactly what k8s::ParseAdmissionReview accepts and
// answers what ParseAdmissionReview + ToAdmissionCall(request, v) would, with the same error
// messages; object_json/old_object_json hold the same JSON value (key order and spacing may
// differ). A body that simdjson parses and that is plainly a well-formed review is read from
// simdjson's DOM (the object is re-serialized from it, not from a second tree); anything else -
// bad JSON, a wrong type, a duplicate key, a missing field - goes through ParseAdmissionReview,
// which names the problem.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(ReviewCall rc, ParseReviewCall(request.body, "1.30"));
//   rc.call.kind().kind() == "Pod"; rc.api_version == "admission.k8s.io/v1"
//   rc.service_account == "loader"
#include <string>
#include <string_view>

#include "wisp/status/status.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::gateway::admission {

struct ReviewCall {
  std::string api_version;  // echoed in the answer
  v1::AdmissionCall call;
  // A Pod's (core group) spec.serviceAccountName, else its deprecated alias spec.serviceAccount,
  // else "default" (what the ServiceAccount admission plugin sets before any webhook); "" for
  // other kinds and for a pod without an object.
  std::string service_account;
};

absl::StatusOr<ReviewCall> ParseReviewCall(std::string_view body,
                                           const std::string& server_version);

}  // namespace wisp::gateway::admission
