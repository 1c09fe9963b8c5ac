#pragma once
// wispctl volume upload: fills an upload volume from a local file through the gateway.
//
//   wispctl volume create disk --capacity 1Gi --upload
//   wispctl volume upload disk ./disk.qcow2      # WISP_GATEWAY_URL, WISP_CA_FILE from local-up
//
// Steps: look the volume up (wisp.v1.volume.get), ask wisp-token for an upload token bound to it
// (wisp.v1.token.upload), PUT the file to <gateway>/v1/upload/<volume id> over HTTPS (verified
// against --ca-file, "Expect: 100-continue" so a refusal arrives before any byte is sent),
// streaming it from disk with a progress bar on a terminal, then print the outcome and the
// volume's phase. Exit 0 once the volume is Succeeded, 1 otherwise (with the gateway's message).
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::wispctl {

int RunUpload(const std::vector<std::string>& args);

struct PutResult {
  int status = 0;
  std::string body;
};

struct PutRequest {
  std::string url;      // https://host:port/path
  std::string ca_file;  // "" = system roots
  std::string file;
  std::map<std::string, std::string> headers;
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds io_timeout = std::chrono::seconds(60);
  std::chrono::milliseconds finish_timeout = std::chrono::minutes(10);
};

// Streams `file` as the body of an HTTPS PUT; `progress(sent, total)` is called as bytes go out.
// A non-2xx answer is a result, not an error; errors are connection, TLS and file failures.
absl::StatusOr<PutResult> PutFile(const PutRequest& request,
                                  const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace wisp::wispctl
