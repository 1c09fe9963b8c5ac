#include "upload.hpp"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <utility>  // before boost/asio (see common/http/src/server.cpp)
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "volume.hpp"
#include "wisp/http/url.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/v1/token.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::wispctl {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using Stream = beast::ssl_stream<beast::tcp_stream>;

absl::StatusOr<http::Url> ParseHttpsUrl(const std::string& url) {
  WISP_ASSIGN_OR_RETURN(http::Url out, http::ParseUrl(url, "--gateway-url"));
  if (out.scheme != "https") {
    return absl::InvalidArgumentError("--gateway-url: \"" + url + "\" is not an https:// URL");
  }
  return out;
}

// Runs one asynchronous operation to its end on `ioc` (so each step gets the stream's timeout).
template <typename Start>
beast::error_code RunOp(asio::io_context& ioc, Start&& start) {
  beast::error_code result;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
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

int Fail(const absl::Status& status) {
  std::cerr << "wispctl volume upload: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

absl::StatusOr<PutResult> PutFile(const PutRequest& request,
                                  const std::function<void(uint64_t, uint64_t)>& progress) {
  WISP_ASSIGN_OR_RETURN(http::Url url, ParseHttpsUrl(request.url));
  std::ifstream in(request.file, std::ios::binary);
  if (!in) return absl::InvalidArgumentError("FILE: cannot read " + request.file);
  in.seekg(0, std::ios::end);
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  in.seekg(0);

  asio::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  beast::error_code ec;
  if (!request.ca_file.empty()) {
    ctx.load_verify_file(request.ca_file, ec);
    if (ec)
      return absl::InvalidArgumentError("--ca-file: " + request.ca_file + ": " + ec.message());
  } else {
    ctx.set_default_verify_paths();
  }
  Stream stream(ioc, ctx);
  stream.set_verify_mode(ssl::verify_peer);
  SSL* s = stream.native_handle();
  beast::error_code ip_ec;
  asio::ip::make_address(url.host, ip_ec);
  if (ip_ec) {
    SSL_set_tlsext_host_name(s, url.host.c_str());
    SSL_set1_host(s, url.host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), url.host.c_str());
  }
  const std::string where = url.host + ":" + url.port;
  tcp::resolver resolver(ioc);
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) return absl::UnavailableError("resolving " + where + ": " + ec.message());
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(request.connect_timeout);
  ec = RunOp(ioc, [&](auto h) { lowest.async_connect(endpoints, std::move(h)); });
  if (ec) return absl::UnavailableError("connecting to " + where + ": " + ec.message());
  lowest.expires_after(request.connect_timeout);
  ec = RunOp(ioc, [&](auto h) { stream.async_handshake(ssl::stream_base::client, std::move(h)); });
  if (ec) {
    long verify = SSL_get_verify_result(s);
    std::string why = verify != X509_V_OK ? std::string("certificate verify failed (") +
                                                X509_verify_cert_error_string(verify) + ")"
                                          : ec.message();
    return absl::UnavailableError("TLS handshake with " + where + " failed: " + why);
  }

  bhttp::request<bhttp::buffer_body> req{bhttp::verb::put, url.target, 11};
  req.set(bhttp::field::host, url.host);
  req.set(bhttp::field::user_agent, "wispctl/" WISP_VERSION);
  req.set(bhttp::field::content_type, "application/octet-stream");
  req.set(bhttp::field::expect, "100-continue");
  for (const auto& [k, v] : request.headers) req.set(k, v);
  req.content_length(total);
  req.body().data = nullptr;
  req.body().more = true;
  bhttp::request_serializer<bhttp::buffer_body> sr{req};
  beast::flat_buffer buf;
  // The final answer, read when the gateway answers early (a refusal) or after the body.
  auto read_answer = [&](std::chrono::milliseconds timeout) -> absl::StatusOr<PutResult> {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(1 << 20);
    lowest.expires_after(timeout);
    auto rec = RunOp(ioc, [&](auto h) { bhttp::async_read(stream, buf, parser, std::move(h)); });
    if (rec)
      return absl::UnavailableError("reading the answer from " + where + ": " + rec.message());
    return PutResult{static_cast<int>(parser.get().result_int()), parser.get().body()};
  };
  lowest.expires_after(request.io_timeout);
  ec = RunOp(ioc, [&](auto h) { bhttp::async_write_header(stream, sr, std::move(h)); });
  if (ec) return absl::UnavailableError("sending to " + where + ": " + ec.message());
  {
    // Expect: 100-continue: the gateway checks token and volume before asking for the body.
    bhttp::response_parser<bhttp::string_body> head;
    lowest.expires_after(request.io_timeout);
    ec = RunOp(ioc, [&](auto h) { bhttp::async_read_header(stream, buf, head, std::move(h)); });
    if (ec) return absl::UnavailableError("waiting for " + where + ": " + ec.message());
    if (head.get().result() != bhttp::status::continue_) {
      lowest.expires_after(request.io_timeout);
      ec = RunOp(ioc, [&](auto h) { bhttp::async_read(stream, buf, head, std::move(h)); });
      if (ec) return absl::UnavailableError("reading the answer: " + ec.message());
      return PutResult{static_cast<int>(head.get().result_int()), head.get().body()};
    }
  }
  std::vector<char> chunk(1 << 20);
  uint64_t sent = 0;
  progress(0, total);
  while (sent < total) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const size_t n = static_cast<size_t>(in.gcount());
    if (n == 0) return absl::DataLossError(request.file + " ended early (it changed?)");
    req.body().data = chunk.data();
    req.body().size = n;
    req.body().more = true;
    lowest.expires_after(request.io_timeout);
    ec = RunOp(ioc, [&](auto h) { bhttp::async_write(stream, sr, std::move(h)); });
    if (ec && ec != bhttp::error::need_buffer) {
      // The gateway may have answered and closed (a bad image): show its answer if it came.
      auto early = read_answer(std::chrono::seconds(2));
      if (early.ok()) return early;
      return absl::UnavailableError("sending " + request.file + " to " + where + " after " +
                                    std::to_string(sent) + " bytes: " + ec.message());
    }
    sent += n;
    progress(sent, total);
  }
  req.body().data = nullptr;
  req.body().size = 0;
  req.body().more = false;
  lowest.expires_after(request.io_timeout);
  ec = RunOp(ioc, [&](auto h) { bhttp::async_write(stream, sr, std::move(h)); });
  if (ec && ec != bhttp::error::need_buffer) {
    return absl::UnavailableError("finishing the upload to " + where + ": " + ec.message());
  }
  auto answer = read_answer(request.finish_timeout);
  beast::error_code ignored;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return answer;
}

int RunUpload(const std::vector<std::string>& args) {
  Connection connection;
  std::string gateway_url = "https://localhost:8443", ca_file, file, sha256;
  std::chrono::milliseconds token_ttl = std::chrono::minutes(5), finish = std::chrono::minutes(10);
  config::Flags flags("wispctl volume upload", "upload a local image into an upload volume");
  flags.Description(
      "Uploads FILE (raw or qcow2, optionally gz/xz/zst compressed: detected by content) into "
      "the volume NAME, which must have been created with --upload. Gets an upload token from "
      "wisp-token, PUTs the file to the gateway's /v1/upload/<volume> over HTTPS, shows progress "
      "on a terminal, and exits 0 once the volume is Succeeded.");
  AddConnectionFlags(flags, connection);
  flags.String("gateway-url", &gateway_url, "https:// URL of wisp-gateway.");
  flags.String("ca-file", &ca_file, "PEM CA bundle that signed the gateway's certificate.");
  flags.String("file", &file, "The image to upload (or give it as the second argument).");
  flags.String("sha256", &sha256, "Expected sha256 of FILE; the populator verifies it.");
  flags.Duration("token-ttl", &token_ttl, "Lifetime of the upload token (60s..1h).");
  flags.Duration("upload-timeout", &finish,
                 "How long to wait, after the last byte, for the volume to be converted and "
                 "verified.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl volume upload", args, code)) return code;
  const auto& pos = flags.Positional();
  if (pos.size() == 2 && file.empty()) file = pos[1];
  if (pos.empty() || pos.size() > 2 || (pos.size() == 2 && file != pos[1]) || file.empty()) {
    std::cerr << "wispctl volume upload: want NAME|ID and FILE (or --file FILE)\n";
    return 2;
  }
  if (::access(file.c_str(), R_OK) != 0) {
    return Fail(absl::InvalidArgumentError("FILE: cannot read " + file));
  }
  auto bus = Connect(connection);
  if (!bus.ok()) return Fail(bus.status());
  auto volume = GetVolumeByRef(**bus, pos[0], connection.timeout);
  if (!volume.ok()) return Fail(volume.status());
  const std::string id = volume->volume_id(), name = volume->spec().name();
  if (!volume->spec().source().has_upload()) {
    return Fail(absl::FailedPreconditionError(
        "volume " + name + " is not an upload target (create it with --upload)"));
  }
  v1::UploadTokenRequest treq;
  treq.set_volume_id(id);
  treq.set_name(name);
  treq.set_namespace_(volume->spec().pvc_namespace());
  treq.set_expiration_seconds(std::chrono::duration_cast<std::chrono::seconds>(token_ttl).count());
  auto token = bus::Call<v1::UploadTokenResponse>(**bus, bus::subjects::kTokenUpload, treq,
                                                  connection.timeout);
  if (!token.ok()) return Fail(token.status());

  PutRequest put;
  while (!gateway_url.empty() && gateway_url.back() == '/') gateway_url.pop_back();
  put.url = gateway_url + "/v1/upload/" + id;
  put.ca_file = ca_file;
  put.file = file;
  put.finish_timeout = finish;
  put.headers["Authorization"] = "Bearer " + token->token();
  if (!sha256.empty()) put.headers["X-Wisp-Sha256"] = sha256;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  auto last_draw = start - std::chrono::seconds(1);
  std::cerr << "uploading " << file << " to " << name << " (" << id << ")\n";
  auto result = PutFile(put, [&](uint64_t sent, uint64_t total) {
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
  if (!result.ok()) return Fail(result.status());
  if (result->status != 200) {
    std::string message = result->body;
    try {
      auto j = nlohmann::json::parse(result->body);
      if (j.contains("error")) message = j["error"].get<std::string>();
    } catch (...) {
    }
    std::cerr << "wispctl volume upload: HTTP " << result->status << ": " << message << "\n";
    return 1;
  }
  // The gateway answers once disk.img is in place; read the record to show what is stored.
  auto after = GetVolumeByRef(**bus, id, connection.timeout);
  if (!after.ok()) return Fail(after.status());
  std::cout << FormatVolume(*after);
  if (after->phase() != v1::SUCCEEDED) {
    std::cerr << "wispctl volume upload: " << name << " is " << PhaseName(after->phase()) << ": "
              << after->message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace wisp::wispctl
