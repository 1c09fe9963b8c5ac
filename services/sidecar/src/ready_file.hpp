#pragma once
// ReadyFile: how the pod's probes learn that the sidecar holds a token, without HTTP and without
// the token: the file holds only the token's expiry.
//
// Contract:
//   - Publish(expiry) atomically replaces the file (a temporary in the same directory, renamed)
//     with one line, the expiry in Unix seconds; mode 0644 (the probe runs as the sidecar's user).
//   - Clear() removes it: a sidecar that stops is not ready, and neither is its next start until
//     it holds a token again.
//   - CheckReady(path, now) is what `wisp-sidecar --probe` (the injected startupProbe and
//     readinessProbe) runs: OK while the file names an expiry after `now`; FailedPrecondition
//     "no token yet" when there is no file, "the token expired at <RFC 3339>" when it lapsed;
//     InvalidArgument naming the path when the content is not a number.
//
// Example:
//   ReadyFile ready("/run/wisp/ready");
//   ready.Publish(token.expiry);                 // after each successful exchange
//   absl::Status s = CheckReady("/run/wisp/ready", std::chrono::system_clock::now());
#include <chrono>
#include <string>

#include "absl/status/status.h"

namespace wisp::sidecar {

class ReadyFile {
 public:
  explicit ReadyFile(std::string path) : path_(std::move(path)) {}
  absl::Status Publish(std::chrono::system_clock::time_point expiry) const;
  void Clear() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::Status CheckReady(const std::string& path, std::chrono::system_clock::time_point now);

}  // namespace wisp::sidecar
