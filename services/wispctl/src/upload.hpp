#pragma once
// wispctl volume upload: fills an upload volume from a local file through the gateway.
//
//   wispctl volume create disk --capacity 1Gi --upload
//   wispctl volume upload disk ./disk.qcow2      # WISP_GATEWAY_URL, WISP_CA_FILE from local-up
//
// Steps: look the volume up (wisp.v1.volume.get), ask wisp-token for an upload token bound to it
// (wisp.v1.token.upload), PUT the file to <gateway>/v1/upload/<volume id> over HTTPS through
// http::Client (verified against --ca-file, "Expect: 100-continue" so a refusal arrives before
// any byte is sent), streaming it from disk with a progress bar on a terminal, then print the
// outcome and the volume's phase. Exit 0 once the volume is Succeeded, 1 otherwise (with the
// gateway's message); 2 for a bad argument (--gateway-url, --ca-file, FILE).
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "wisp/http/client.hpp"
#include "wisp/status/status.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::wispctl {

int RunUpload(const std::vector<std::string>& args);

// What an upload needs besides the volume: flags shared by `volume upload` and `datavolume upload`.
struct UploadOptions {
  std::string gateway_url = "https://localhost:8443";
  std::string ca_file;
  std::string server_name;  // --gateway-server-name
  std::string file;
  std::string sha256;
  std::chrono::milliseconds token_ttl = std::chrono::minutes(5);
  std::chrono::milliseconds finish = std::chrono::minutes(10);
  std::string name, namespace_;  // for the upload token's claims ("" = the volume's)
};
void AddUploadFlags(config::Flags& flags, UploadOptions& options);
// FILE as the second positional argument (or --file), readable; InvalidArgument otherwise.
absl::Status TakeFileArgument(const std::vector<std::string>& positional, UploadOptions& options,
                              const std::string& want);
// Token, PUT, outcome (the steps above) for `volume`; messages start with `command`. Returns the
// exit code.
int UploadToVolume(bus::Bus& bus, const Connection& connection, const v1::VolumeStatus& volume,
                   UploadOptions options, const std::string& command);

struct PutResult {
  int status = 0;
  std::string body;
};

struct PutRequest {
  std::string url;  // https://host:port/path
  std::string file;
  std::string bearer_token;  // never logged
  std::map<std::string, std::string> headers;
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);  // for NewUploadClient
  std::chrono::milliseconds io_timeout = std::chrono::seconds(60);       // each read and write
  std::chrono::milliseconds finish_timeout = std::chrono::minutes(10);   // last byte -> answer
};

// The client PutFile() sends through: TLS verified against `ca_file` ("" = the system roots).
// InvalidArgument naming --ca-file when it cannot be loaded.
// `server_name` ("" = the URL's host): the name the gateway's certificate must carry, for a
// gateway reached through another address (kubectl port-forward).
absl::StatusOr<http::ClientPtr> NewUploadClient(const std::string& ca_file,
                                                std::chrono::milliseconds connect_timeout,
                                                std::chrono::milliseconds io_timeout,
                                                const std::string& server_name = "");

// Streams `file` as the body of an HTTPS PUT; `progress(sent, total)` is called as bytes go out.
// A non-2xx answer is a result, not an error; errors are connection, TLS and file failures, in
// http::Client's one Status mapping (an untrusted gateway certificate is FailedPrecondition).
absl::StatusOr<PutResult> PutFile(http::Client& client, const PutRequest& request,
                                  const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace wisp::wispctl
