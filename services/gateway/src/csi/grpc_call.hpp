#pragma once
// Shared plumbing of the CSI handlers: absl::Status <-> grpc::Status, and Instrument(), which
// wraps one handler call with secret-free logging, the request id, metrics and exception safety.
//
// Example (inside a grpc service override):
//   return Instrument(metrics_, logger_, "NodePublishVolume", request->volume_id(), *request,
//                     response, [&] { return Publish(*request); });
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "csi/csi_metrics.hpp"
#include "csi/strip_secrets.hpp"
#include "wisp/log/log.hpp"
#include "wisp/status/status.hpp"

namespace wisp::gateway::csi {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// The time left before the caller's deadline, capped at `cap`.
inline std::chrono::milliseconds Budget(const grpc::ServerContext* context,
                                        std::chrono::milliseconds cap) {
  if (context == nullptr) return cap;
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return cap;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::system_clock::now());
  if (left < std::chrono::milliseconds(1)) left = std::chrono::milliseconds(1);
  return std::min(cap, left);
}

template <typename Req, typename Resp, typename Fn>
grpc::Status Instrument(CsiMetrics& metrics, const std::shared_ptr<spdlog::logger>& logger,
                        const char* method, const std::string& request_id, const Req& request,
                        Resp* response, Fn&& fn) {
  log::ScopedRequestId rid(request_id);
  const auto start = std::chrono::steady_clock::now();
  // Runtime level check (not the compile-time macro) so --log-level debug shows requests.
  if (logger->should_log(spdlog::level::debug)) {
    logger->debug("{} request: {}", method, StripSecrets(request));
  }
  absl::Status status;
  try {
    absl::StatusOr<Resp> result = fn();
    status = result.status();
    if (result.ok()) *response = *std::move(result);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    status = absl::InternalError(std::string(method) + ": " + e.what());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics.Request(method, status.code(), seconds);
  if (status.ok()) {
    if (logger->should_log(spdlog::level::debug)) {
      logger->debug("{} ok in {:.1f} ms", method, seconds * 1e3);
    }
  } else if (status.code() == absl::StatusCode::kInvalidArgument ||
             status.code() == absl::StatusCode::kNotFound ||
             status.code() == absl::StatusCode::kAlreadyExists) {
    SPDLOG_LOGGER_INFO(logger, "{} refused: {} {}", method, StatusCodeName(status.code()),
                       std::string(status.message()));
  } else {
    SPDLOG_LOGGER_WARN(logger, "{} failed: {} {}", method, StatusCodeName(status.code()),
                       std::string(status.message()));
  }
  return ToGrpc(status);
}

}  // namespace wisp::gateway::csi
