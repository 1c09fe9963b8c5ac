#pragma once
// HTTP(S) serving for the gateway, the metrics endpoints and the sidecar's unix socket.
//
// Contract:
//   - Handlers are synchronous, Response(const Request&), or asynchronous, void(const Request&,
//     Responder). The server runs `threads` I/O threads, each with the connections it was handed
//     (in turn, as they are accepted), and a pool of `threads` worker threads. A synchronous
//     handler runs on the pool and may block (a bus request): it holds its worker until it
//     returns, so at most `threads` such requests are in flight, and the connections keep being
//     served meanwhile. An asynchronous handler runs on its connection's I/O thread and must not
//     block: it returns at once and answers later by calling the Responder from any thread (a bus
//     callback), so the in-flight requests are not bounded by `threads`; use it for handlers that
//     wait on the network.
//   - Bodies are read raw into Request::body, at most max_body_bytes (413 beyond, with a JSON
//     error); request line + headers at most 64 KiB; slow clients time out (read_timeout).
//   - TLS when cert_file/key_file are set: TLS 1.2 minimum; the files are re-read when they change
//     (checked at most every cert_reload_interval), so rotated certificates need no restart.
//     client_ca_file set: mutual TLS, a client without a certificate that CA signed is refused.
//   - unix_socket set: serve plain HTTP on that path (stale socket removed, mode socket_mode).
//   - An unknown path is 404, a known path with another method 405, both with a JSON error body.
//   - Streaming routes (HandleStream, for uploads of GiB): the handler gets the request line and
//     headers, and pulls the body itself through a BodyReader, so nothing buffers the whole body.
//     It runs on a thread of its own (at most StreamOptions::max_concurrent at once, 503 beyond),
//     not on a worker thread, so a slow upload never holds a worker. Each body read waits at most
//     read_timeout. A handler that answers before reading the whole body (a 401) closes the
//     connection after the answer. "Expect: 100-continue" is answered when the handler first
//     reads, so a client that waits for it sends nothing that would be refused.
//     When any streaming route is registered, every request's headers are read before its body
//     (one more read step per request); without one the synchronous path is unchanged.
//
// Example:
//   auto server = http::Server::Create({.port = 8443, .cert_file = c, .key_file = k});
//   (*server)->Handle("POST", "/mutate", [&](const http::Request& r) { return admission.Mutate(r);
//   }); WISP_RETURN_IF_ERROR((*server)->Start());
//   ... (*server)->Stop();
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/status/status.hpp"

namespace boost::asio {
class io_context;
}

namespace wisp::http {

struct Request {
  std::string method;
  std::string target;  // as sent: path?query
  std::string path;
  std::string query;
  std::map<std::string, std::string, std::less<>> headers;  // names lower-cased
  std::string body;
  std::string remote;  // peer address ("unix" for a unix socket)

  std::string_view Header(std::string_view lower_name) const;
  // URL-decoded query parameter.
  std::optional<std::string> Query(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  static Response Json(int status, std::string body);
  // {"error": "<message>"} with the given status.
  static Response Error(int status, std::string_view message);
  static Response Text(int status, std::string body);
};

using Handler = std::function<Response(const Request&)>;

// The body of a request on a streaming route, pulled by its handler (from the handler's thread).
class BodyReader {
 public:
  virtual ~BodyReader() = default;
  // Reads up to `n` bytes; 0 means the body ended cleanly. Errors: DeadlineExceeded (the client
  // sent nothing for read_timeout), Unavailable (the connection closed before the body ended),
  // OutOfRange (the body is larger than the route's max_body_bytes), InvalidArgument (malformed
  // chunked encoding), Cancelled (the server is stopping). After an error every Read fails.
  virtual absl::StatusOr<size_t> Read(char* buf, size_t n) = 0;
  // Content-Length when the client sent one (else the body is chunked).
  virtual std::optional<uint64_t> content_length() const = 0;
  virtual uint64_t bytes_read() const = 0;
};
// `request.body` is empty: the body is `body`.
using StreamHandler = std::function<Response(const Request& request, BodyReader& body)>;

struct StreamOptions {
  uint64_t max_body_bytes = 1ull << 40;  // 413 beyond (checked against Content-Length up front)
  int max_concurrent = 16;               // handlers running at once; 503 beyond
};
// Answers one request handed to an AsyncHandler. Copyable; call it once, from any thread (later
// calls are ignored). When the last copy goes away without a call, the client gets a 500, so a lost
// callback cannot leave a connection hanging. A response after Server::Stop is dropped.
class Responder {
 public:
  Responder() = default;
  explicit Responder(std::function<void(Response)> send);
  void operator()(Response response) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};
// The handler may keep nothing of `request` past its return but what it copies.
using AsyncHandler = std::function<void(const Request&, Responder)>;

struct HostPort {
  std::string host;  // "0.0.0.0" when the address had none; IPv6 without brackets
  uint16_t port = 0;
};
// Parses a listen address "host:port", ":port" or "[v6]:port". InvalidArgument naming `field`
// ("metrics-address: \"x\" is not host:port") when it is not one.
absl::StatusOr<HostPort> ParseHostPort(std::string_view field, std::string_view address);

struct ServerOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 0;        // 0 = pick a free port (see Server::port())
  std::string unix_socket;  // when set, address/port are ignored
  uint32_t socket_mode = 0660;
  std::string cert_file;  // PEM chain; TLS when set together with key_file
  std::string key_file;
  // When set, clients must present a certificate signed by a CA in this PEM file (mutual TLS).
  std::string client_ca_file;
  std::chrono::seconds cert_reload_interval{10};
  size_t max_body_bytes = 3 * 1024 * 1024;
  int threads = 4;
  std::chrono::seconds read_timeout{10};
  std::chrono::seconds idle_timeout{60};
  std::string name = "http";  // for logs and metrics
};

class Server {
 public:
  virtual ~Server() = default;
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);

  // Registers a handler for an exact path. Register before Start().
  virtual void Handle(std::string method, std::string path, Handler handler) = 0;
  // Registers a handler for every path under a prefix ("/v1/upload/").
  virtual void HandlePrefix(std::string method, std::string prefix, Handler handler) = 0;
  // Registers a streaming handler for every path under a prefix (see the contract above).
  virtual void HandleStream(std::string method, std::string prefix, StreamHandler handler,
                            StreamOptions options = {}) = 0;
  // Registers an asynchronous handler for an exact path. Register before Start().
  virtual void HandleAsync(std::string method, std::string path, AsyncHandler handler) = 0;
  virtual absl::Status Start() = 0;
  virtual uint16_t port() const = 0;
  // The io_context of each I/O thread (index = thread), for parts that run on those threads (a
  // bus connection driven by the thread's event loop). Valid from Create() until destruction.
  virtual std::vector<boost::asio::io_context*> IoContexts() = 0;
  // Stops accepting, closes connections waiting between requests at once, finishes in-flight
  // requests (at most `grace`; their connections close after the answer), joins the threads.
  virtual void Stop(std::chrono::milliseconds grace = std::chrono::seconds(5)) = 0;
};
using ServerPtr = std::unique_ptr<Server>;

}  // namespace wisp::http
