#pragma once
// http::Client: wisp's one outbound HTTP/1.1 client (Boost.Beast + OpenSSL), for image downloads,
// JWKS fetches, STS exchanges, uploads and, next, the Kubernetes API (watch streams included).
//
// Contract:
//   - TLS (https://) verifies the server against TlsConfig's CA bundle (PEM in memory and/or a
//     file), the system store when neither is given (or with system_roots), and checks the host
//     name, or the IP address for a literal IP, which is also what SNI names (server_name
//     overrides both, as kubeconfig's tls-server-name does). TLS 1.2 minimum. A client
//     certificate (cert + key PEM) is offered when configured. Plain http:// is allowed; callers
//     that must not use it (JWKS, STS) refuse it themselves.
//   - Deadlines: connect_timeout bounds resolve + TCP connect + TLS handshake; read_timeout bounds
//     each read and each write (a stream that trickles stays open as long as bytes keep coming);
//     a request's response_timeout, when set, replaces it for the wait between the last byte
//     sent and the response's headers (an upload the server converts before it answers);
//     total_timeout (0 = none) bounds the whole request, body included. A watch sets no total.
//   - Redirects are not followed unless max_redirects > 0; then 301/302/303/307/308 are followed
//     that many times (303, and 301/302 of a POST, become a GET without body); a redirect to
//     another host drops Authorization and the bearer token; https -> http is refused; a body
//     from a reader (not replayable) stops at the 3xx, which is returned as the response.
//   - Send() buffers the response body, at most max_response_bytes (ResourceExhausted beyond,
//     checked against Content-Length before reading). Open() returns after the headers and the
//     caller pulls the body: Read() into its own buffer (a Content-Length body goes straight
//     from the socket into it, no copy), or ReadLine() for line-delimited streams.
//   - Request bodies: `body` (a string), or `body_reader` (pulled as it is sent: Content-Length
//     when body_size is set, chunked otherwise). expect_continue sends the headers first and
//     waits (read_timeout) for 100 Continue; an early final answer (a 401) is returned without
//     sending the body.
//   - Connections are kept alive and reused for sequential requests to the same scheme, host and
//     port (at most max_idle_per_host idle ones each); a reused connection that turns out closed
//     is replaced once, transparently, when the request has no body_reader.
//   - Bearer tokens and header values are sent, never logged and never put in a Status. URLs in
//     messages are redacted (Url::Redacted(): no user info, no query).
//   - Thread-safe: many threads may call one Client. A ResponseStream belongs to one thread.
//
// Errors (one mapping for every caller; messages name the method and redacted URL):
//   bad URL, unreadable/invalid CA, cert or key           -> InvalidArgument (at Create or call)
//   DNS failure, connection refused/reset, closed early    -> Unavailable
//   body cut short                                         -> Unavailable "body truncated: ..."
//   connect/read/total deadline passed                     -> DeadlineExceeded
//   server certificate not trusted / wrong name / expired  -> FailedPrecondition
//     "TLS handshake with host:port failed: certificate verify failed (...)"
//   other TLS handshake failure (no TLS there, no common protocol) -> FailedPrecondition
//   the server refused our client certificate (or wanted one) -> Unauthenticated
//   response larger than max_response_bytes / line longer than its limit -> ResourceExhausted
//   too many redirects, https->http redirect               -> FailedPrecondition
// HTTP answers are responses, not errors; StatusOf(response) maps them, once, for everyone:
//   2xx OK · 400 InvalidArgument · 401 Unauthenticated · 403 PermissionDenied · 404/410 NotFound
//   · 408 DeadlineExceeded · 409 Aborted · 412 FailedPrecondition · 416 OutOfRange
//   · 429 ResourceExhausted · 501 Unimplemented · other 5xx Unavailable · other 4xx, 1xx and
//   3xx FailedPrecondition; message "HTTP 404 Not Found from https://host/path".
// Retrying helps for Unavailable, DeadlineExceeded, ResourceExhausted and Aborted; not for the
// rest.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(auto client, http::NewClient({.tls = {.ca_file = "/etc/wisp/ca.pem"}}));
//   WISP_ASSIGN_OR_RETURN(http::ClientResponse r,
//                         client->Send({.url = "https://idp/keys", .bearer_token = token}));
//   WISP_RETURN_IF_ERROR(http::StatusOf(r));
//   // A watch: lines as they arrive, each read waiting at most read_timeout.
//   WISP_ASSIGN_OR_RETURN(auto watch, client->Open({.url = api + "/api/v1/pods?watch=1"}));
//   while (true) {
//     WISP_ASSIGN_OR_RETURN(std::optional<std::string> line, watch->ReadLine());
//     if (!line) break;  // the server ended the watch
//   }
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::http {

struct TlsConfig {
  std::string ca_pem;         // trusted CAs, PEM (one or more certificates)
  std::string ca_file;        // trusted CAs read from a PEM file at NewClient()
  bool system_roots = false;  // also trust the system store (always when no CA is given)
  std::string cert_pem;       // client certificate (chain), PEM; or cert_file
  std::string key_pem;        // its private key, PEM; or key_file
  std::string cert_file;
  std::string key_file;
  std::string server_name;  // SNI and the name checked, instead of the URL's host
};

struct ClientOptions {
  TlsConfig tls;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds total_timeout{0};  // 0 = none
  int max_redirects = 0;
  uint64_t max_response_bytes = 64ull << 20;  // Send() only
  std::string user_agent = "wisp";
  std::string bearer_token;  // sent as "Authorization: Bearer ..." on every request
  int max_idle_per_host = 4;
  std::string name = "http-client";  // logger name
};

// Pulls a request body: fills up to `n` bytes of `buf`, returns how many; 0 = the body ended.
using BodyReaderFn = std::function<absl::StatusOr<size_t>(char* buf, size_t n)>;

struct ClientRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // values never logged
  std::string bearer_token;                                  // overrides ClientOptions'
  std::string body;
  BodyReaderFn body_reader;           // instead of `body`
  std::optional<uint64_t> body_size;  // with body_reader: Content-Length (else chunked)
  bool expect_continue = false;
  // Range: bytes=<range_start>-[<range_end>] (inclusive); If-Range when if_range is set.
  std::optional<uint64_t> range_start;
  std::optional<uint64_t> range_end;
  std::string if_range;
  // Per-request overrides of ClientOptions.
  std::optional<std::chrono::milliseconds> read_timeout;
  std::optional<std::chrono::milliseconds> response_timeout;  // see Deadlines above
  std::optional<std::chrono::milliseconds> total_timeout;
  std::optional<int> max_redirects;
  std::optional<uint64_t> max_response_bytes;
};

struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;
  std::optional<uint64_t> total;  // "*" = unknown
};

struct ClientResponse {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;                                          // Send() only
  std::optional<uint64_t> content_length;
  std::optional<ContentRange> content_range;  // a 206's, parsed
  std::string url;                            // redacted, after redirects
  std::string method;

  // The first value of a header (lower-case name), "" when absent.
  std::string_view Header(std::string_view lower_name) const;
};

// OK for 2xx; otherwise the one HTTP-status mapping above, naming status, reason and URL.
absl::Status StatusOf(const ClientResponse& response);
absl::Status StatusOfHttp(int status, std::string_view reason, std::string_view redacted_url);

// A response whose body the caller pulls. Destroying it before the body ended closes the
// connection; after the end, the connection goes back to the client's pool.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual const ClientResponse& response() const = 0;
  // Reads up to `n` body bytes into `buf`; 0 = the body ended. Each call waits at most
  // read_timeout (and the total deadline, when one is set).
  virtual absl::StatusOr<size_t> Read(char* buf, size_t n) = 0;
  // The next line of the body without its "\n" (or "\r\n"); nullopt when the body ended. A line
  // longer than max_line is ResourceExhausted.
  virtual absl::StatusOr<std::optional<std::string>> ReadLine(size_t max_line = 16 << 20) = 0;
  // Body bytes read so far.
  virtual uint64_t bytes_read() const = 0;
};
using ResponseStreamPtr = std::unique_ptr<ResponseStream>;

class Client {
 public:
  virtual ~Client() = default;
  // The whole response, body buffered (see max_response_bytes). Any HTTP status is a response.
  virtual absl::StatusOr<ClientResponse> Send(const ClientRequest& request) = 0;
  // The response's status and headers; the body is pulled through the stream.
  virtual absl::StatusOr<ResponseStreamPtr> Open(const ClientRequest& request) = 0;
};
using ClientPtr = std::unique_ptr<Client>;

// InvalidArgument naming the field (tls.ca_file, tls.cert_pem, ...) when TLS material is bad.
absl::StatusOr<ClientPtr> NewClient(ClientOptions options);

}  // namespace wisp::http
