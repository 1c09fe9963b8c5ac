#pragma once
// Kubernetes API errors as absl::Status: the apiserver's Status body (reason, code, message) mapped
// to a code, with the Kubernetes reason kept in a payload so callers can tell them apart.
//
// Contract:
//   - Reason -> code: NotFound -> NotFound; AlreadyExists -> AlreadyExists; Conflict -> Aborted;
//     Forbidden -> PermissionDenied; Unauthorized -> Unauthenticated; Invalid, BadRequest ->
//     InvalidArgument; Gone, Expired (410) -> OutOfRange; TooManyRequests -> ResourceExhausted;
//     Timeout, ServerTimeout, InternalError, ServiceUnavailable -> Unavailable; MethodNotAllowed
//     (the resource has no such verb) -> Unimplemented; NotAcceptable, UnsupportedMediaType,
//     RequestEntityTooLarge -> FailedPrecondition. Without a reason
//     (a body that is not a Status), the HTTP code decides, with 410 -> OutOfRange and 409 ->
//     Aborted; the reason payload is then the HTTP status's name ("Gone").
//   - The message is "<context>: <apiserver message> (<reason>, HTTP <code>)", the context naming
//     verb, resource and namespace/name ("kube get configmaps default/app").
//   - ReasonOf(status) is the Kubernetes reason ("" for a Status that did not come from here).
//   - Call the Is* helpers qualified (kube::IsNotFound): absl has its own IsNotFound and
//     IsAlreadyExists, which argument-dependent lookup finds too. kube::IsNotFound also checks
//     the reason, so a transport-level NotFound (a missing file) is not mistaken for it.
//
// Example:
//   absl::StatusOr<Json> cm = client.Get(kube::kConfigMaps, "default", "app");
//   if (kube::IsNotFound(cm.status())) { ... create it ... }
//   if (kube::IsConflict(status)) { ... re-read and retry ... }
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wisp/status/status.hpp"

namespace wisp::kube {

// The payload type URL under which the reason travels in a Status.
inline constexpr char kReasonPayload[] = "type.wisp.dev/kube.reason";

// The status for an apiserver answer: `http_code` with `body` (a Status object, or anything).
absl::Status StatusFromApi(int http_code, std::string_view body, std::string_view context);
// The same from an already parsed Status object (a watch ERROR event's object).
absl::Status StatusFromStatusObject(const nlohmann::json& status, std::string_view context);

std::string ReasonOf(const absl::Status& status);
bool IsNotFound(const absl::Status& status);
bool IsAlreadyExists(const absl::Status& status);
bool IsConflict(const absl::Status& status);
// 410: a resourceVersion too old for a watch or a continue token that expired.
bool IsGone(const absl::Status& status);

}  // namespace wisp::kube
