#include "upload.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "volume.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/http/url.hpp"
#include "wisp/v1/token.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::wispctl {
namespace {

absl::Status ValidateHttpsUrl(const std::string& url) {
  WISP_ASSIGN_OR_RETURN(http::Url out, http::ParseUrl(url, "--gateway-url"));
  if (out.scheme != "https") {
    return absl::InvalidArgumentError("--gateway-url: \"" + url + "\" is not an https:// URL");
  }
  return absl::OkStatus();
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

absl::StatusOr<http::ClientPtr> NewUploadClient(const std::string& ca_file,
                                                std::chrono::milliseconds connect_timeout,
                                                std::chrono::milliseconds io_timeout,
                                                const std::string& server_name) {
  auto client = http::NewClient({.tls = {.ca_file = ca_file, .server_name = server_name},
                                 .connect_timeout = connect_timeout,
                                 .read_timeout = io_timeout,
                                 .user_agent = "wispctl/" WISP_VERSION,
                                 .max_idle_per_host = 0,
                                 .name = "upload"});
  if (!client.ok() && client.status().code() == absl::StatusCode::kInvalidArgument) {
    std::string why(client.status().message());
    if (why.rfind("tls.ca_file: ", 0) == 0) why = why.substr(13);
    return absl::InvalidArgumentError("--ca-file: " + why);
  }
  return client;
}

absl::StatusOr<PutResult> PutFile(http::Client& client, const PutRequest& request,
                                  const std::function<void(uint64_t, uint64_t)>& progress) {
  WISP_RETURN_IF_ERROR(ValidateHttpsUrl(request.url));
  std::ifstream in(request.file, std::ios::binary);
  if (!in) return absl::InvalidArgumentError("FILE: cannot read " + request.file);
  in.seekg(0, std::ios::end);
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  in.seekg(0);

  http::ClientRequest req{.method = "PUT", .url = request.url};
  req.bearer_token = request.bearer_token;
  req.headers.emplace_back("Content-Type", "application/octet-stream");
  for (const auto& [k, v] : request.headers) req.headers.emplace_back(k, v);
  // The file streams from disk as it is sent; "Expect: 100-continue" lets the gateway check
  // token and volume before asking for the body, so a refusal arrives before any byte is read.
  uint64_t sent = 0;
  bool started = false;
  req.body_reader = [&](char* buf, size_t n) -> absl::StatusOr<size_t> {
    if (!started) {
      started = true;
      progress(0, total);
    }
    if (sent == total) return size_t{0};
    in.read(buf, static_cast<std::streamsize>(std::min<uint64_t>(n, total - sent)));
    const size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) return absl::DataLossError(request.file + " ended early (it changed?)");
    sent += got;
    progress(sent, total);
    return got;
  };
  req.body_size = total;
  req.expect_continue = true;
  // After the last byte the gateway converts and verifies before it answers.
  req.response_timeout = request.finish_timeout;
  req.max_response_bytes = 1 << 20;
  WISP_ASSIGN_OR_RETURN(http::ClientResponse res, client.Send(req));
  return PutResult{res.status, std::move(res.body)};
}

void AddUploadFlags(config::Flags& flags, UploadOptions& options) {
  flags.String("gateway-url", &options.gateway_url, "https:// URL of wisp-gateway.");
  flags.String("ca-file", &options.ca_file, "PEM CA bundle that signed the gateway's certificate.");
  flags.String("gateway-server-name", &options.server_name,
               "The name the gateway's certificate is checked for (and SNI), when --gateway-url "
               "reaches it through another address, e.g. wisp-gateway.wisp-system.svc through "
               "kubectl port-forward (default: the URL's host).");
  flags.String("file", &options.file, "The image to upload (or give it as the second argument).");
  flags.String("sha256", &options.sha256, "Expected sha256 of FILE; the populator verifies it.");
  flags.Duration("token-ttl", &options.token_ttl, "Lifetime of the upload token (60s..1h).");
  flags.Duration("upload-timeout", &options.finish,
                 "How long to wait, after the last byte, for the volume to be converted and "
                 "verified.");
}

absl::Status TakeFileArgument(const std::vector<std::string>& positional, UploadOptions& options,
                              const std::string& want) {
  if (positional.size() == 2 && options.file.empty()) options.file = positional[1];
  if (positional.empty() || positional.size() > 2 ||
      (positional.size() == 2 && options.file != positional[1]) || options.file.empty()) {
    return absl::InvalidArgumentError("want " + want + " and FILE (or --file FILE)");
  }
  if (::access(options.file.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError("FILE: cannot read " + options.file);
  }
  return absl::OkStatus();
}

int UploadToVolume(bus::Bus& bus, const Connection& connection, const v1::VolumeStatus& volume,
                   UploadOptions options, const std::string& command) {
  const std::string id = volume.volume_id(), name = volume.spec().name();
  if (!volume.spec().source().has_upload()) {
    return Fail(command,
                absl::FailedPreconditionError(
                    "volume " + name + " is not an upload target (create it with --upload)"));
  }
  v1::UploadTokenRequest treq;
  treq.set_volume_id(id);
  treq.set_name(options.name.empty() ? name : options.name);
  treq.set_namespace_(options.namespace_.empty() ? volume.spec().pvc_namespace()
                                                 : options.namespace_);
  treq.set_expiration_seconds(
      std::chrono::duration_cast<std::chrono::seconds>(options.token_ttl).count());
  auto token = bus::Call<v1::UploadTokenResponse>(bus, bus::subjects::kTokenUpload, treq,
                                                  connection.timeout);
  if (!token.ok()) return Fail(command, token.status());

  PutRequest put;
  std::string gateway_url = options.gateway_url;
  while (!gateway_url.empty() && gateway_url.back() == '/') gateway_url.pop_back();
  put.url = gateway_url + "/v1/upload/" + id;
  put.file = options.file;
  put.finish_timeout = options.finish;
  put.bearer_token = token->token();
  if (!options.sha256.empty()) put.headers["X-Wisp-Sha256"] = options.sha256;
  auto client =
      NewUploadClient(options.ca_file, put.connect_timeout, put.io_timeout, options.server_name);
  if (!client.ok()) return Fail(command, client.status());
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  auto last_draw = start - std::chrono::seconds(1);
  std::cerr << "uploading " << options.file << " to " << name << " (" << id << ")\n";
  auto result = PutFile(**client, put, [&](uint64_t sent, uint64_t total) {
    if (!tty) return;
    auto now = std::chrono::steady_clock::now();
    if (sent != total && now - last_draw < std::chrono::milliseconds(200)) return;
    last_draw = now;
    double secs = std::chrono::duration<double>(now - start).count();
    std::string rate = secs > 0 ? HumanBytes(static_cast<double>(sent) / secs) + "/s" : "";
    std::cerr << "\r\033[K"
              << ProgressBar(total ? std::optional<double>(static_cast<double>(sent) /
                                                           static_cast<double>(total))
                                   : std::optional<double>(1.0),
                             30)
              << "  " << HumanBytes(static_cast<double>(sent)) << "  " << rate
              << (sent == total ? "  converting and verifying..." : "") << std::flush;
  });
  if (tty) std::cerr << "\n";
  if (!result.ok()) return Fail(command, result.status());
  if (result->status != 200) {
    std::string message = result->body;
    try {
      auto j = nlohmann::json::parse(result->body);
      if (j.contains("error")) message = j["error"].get<std::string>();
    } catch (...) {
    }
    std::cerr << command << ": HTTP " << result->status << ": " << message << "\n";
    return 1;
  }
  // The gateway answers once disk.img is in place; read the record to show what is stored.
  auto after = GetVolumeByRef(bus, id, connection.timeout);
  if (!after.ok()) return Fail(command, after.status());
  std::cout << FormatVolume(*after);
  if (after->phase() != v1::SUCCEEDED) {
    std::cerr << command << ": " << name << " is " << PhaseName(after->phase()) << ": "
              << after->message() << "\n";
    return 1;
  }
  return 0;
}

int RunUpload(const std::vector<std::string>& args) {
  const std::string command = "wispctl volume upload";
  Connection connection;
  UploadOptions options;
  config::Flags flags(command, "upload a local image into an upload volume");
  flags.Description(
      "Uploads FILE (raw or qcow2, optionally gz/xz/zst compressed: detected by content) into "
      "the volume NAME, which must have been created with --upload. Gets an upload token from "
      "wisp-token, PUTs the file to the gateway's /v1/upload/<volume> over HTTPS, shows progress "
      "on a terminal, and exits 0 once the volume is Succeeded. For a DataVolume with "
      "spec.source.upload on a cluster, use `wispctl datavolume upload NAMESPACE/NAME FILE`.");
  AddConnectionFlags(flags, connection);
  AddUploadFlags(flags, options);
  int code = 0;
  if (!ParseCommand(flags, command, args, code)) return code;
  const auto& pos = flags.Positional();
  if (auto st = TakeFileArgument(pos, options, "NAME|ID"); !st.ok()) return Fail(command, st);
  auto bus = Connect(connection);
  if (!bus.ok()) return Fail(command, bus.status());
  auto volume = GetVolumeByRef(**bus, pos[0], connection.timeout);
  if (!volume.ok()) return Fail(command, volume.status());
  return UploadToVolume(**bus, connection, *volume, options, command);
}

}  // namespace wisp::wispctl
