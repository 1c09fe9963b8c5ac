#pragma once
// wisp's error model: absl::Status / absl::StatusOr<T> across every module boundary.
//
// Contract:
//   - No exceptions cross a wisp API. Third-party exceptions are caught at the adapter and
//   converted.
//   - Codes are gRPC's (absl::StatusCode maps 1:1 onto grpc::StatusCode and the CSI spec's codes),
//   so a
//     Status travels unchanged over the bus (Nats-Service-Error-Code) and out of the CSI socket.
//   - Bad outside input is InvalidArgument with a message that names the field.
//
// Example:
//   absl::StatusOr<int> ParsePort(std::string_view s);
//   absl::Status Listen(std::string_view s) {
//     WISP_ASSIGN_OR_RETURN(int port, ParsePort(s));
//     WISP_RETURN_IF_ERROR(Bind(port));
//     return absl::OkStatus();
//   }
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace wisp {

// The canonical upper-case name of a code ("INVALID_ARGUMENT"), as gRPC and NATS micro errors print
// it.
std::string_view StatusCodeName(absl::StatusCode code);

// Parses either a numeric gRPC code ("3") or a canonical name ("INVALID_ARGUMENT"); unknown ->
// kUnknown.
absl::StatusCode ParseStatusCode(std::string_view text);

// Prefixes the message of a non-OK status with context, keeping the code: "loading policy: <msg>".
absl::Status Annotate(const absl::Status& status, std::string_view context);

}  // namespace wisp

#define WISP_STATUS_CONCAT_INNER_(a, b) a##b
#define WISP_STATUS_CONCAT_(a, b) WISP_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define WISP_RETURN_IF_ERROR(expr)                                  \
  do {                                                              \
    if (::absl::Status wisp_status_ = (expr); !wisp_status_.ok()) { \
      return wisp_status_;                                          \
    }                                                               \
  } while (false)

// `WISP_ASSIGN_OR_RETURN(T v, StatusOr<T> expr)`: declares/assigns v or returns the error.
#define WISP_ASSIGN_OR_RETURN(lhs, expr) \
  WISP_ASSIGN_OR_RETURN_IMPL_(WISP_STATUS_CONCAT_(wisp_statusor_, __LINE__), lhs, expr)
#define WISP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()
