#pragma once
// ReadFile: a whole file into a string. The one helper every library, service, test and benchmark
// uses to read a policy, a PEM bundle, a key, a token or a log, instead of an ifstream of its own.
//
// Contract:
//   - Reads to end of file, bytes as they are (binary-safe), following symbolic links (a
//     Kubernetes-projected file is a link into ..data/); /proc files, whose size says 0, work.
//   - At most `max_bytes`: a larger file is OutOfRange, not read into memory.
//   - Errors name the path: NotFound when it does not exist, PermissionDenied when it may not be
//     read, FailedPrecondition for a directory, Internal for an I/O error. Messages are
//     "<path>: <reason>", so a caller adds what the file was for:
//     "policy-file: cannot read /etc/wisp/policy.yaml: No such file or directory".
//   - ReadTrimmedFile() also drops trailing '\n', '\r', ' ' and '\t' (a password or token file
//     written by echo or kubectl).
//
// Example:
//   WISP_ASSIGN_OR_RETURN(std::string pem, fsutil::ReadFile(options.ca_file));
//   std::string log = fsutil::ReadFile(log_path).value_or("");  // a test: "" when missing
#include <cstddef>
#include <string>

#include "wisp/status/status.hpp"

namespace wisp::fsutil {

inline constexpr size_t kDefaultMaxFileBytes = size_t{64} << 20;

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     size_t max_bytes = kDefaultMaxFileBytes);

absl::StatusOr<std::string> ReadTrimmedFile(const std::string& path,
                                            size_t max_bytes = kDefaultMaxFileBytes);

}  // namespace wisp::fsutil
