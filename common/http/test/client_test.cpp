// http::Client against the repo's own http::Server over real TLS (certificates made with the
// openssl CLI for each run), plus a raw TLS socket server for what http::Server will not do on
// purpose: trickle a stream, cut a body short, accept and never answer.
#include "wisp/http/client.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "wisp/http/server.hpp"
#include "wisp/http/testing/test_pki.hpp"

namespace wisp::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using std::chrono::milliseconds;
using std::chrono::seconds;
using tcp = asio::ip::tcp;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Has(const absl::Status& st, std::string_view text) {
  return std::string(st.message()).find(text) != std::string::npos;
}

// A TLS server on a raw socket: each connection is handed, after the handshake (unless
// `handshake` is false), to `serve` on a thread of its own.
class RawTlsServer {
 public:
  using Stream = asio::ssl::stream<tcp::socket>;
  RawTlsServer(const std::string& dir, std::function<void(Stream&)> serve, bool handshake = true)
      : ctx_(asio::ssl::context::tls_server), serve_(std::move(serve)), handshake_(handshake) {
    ctx_.use_certificate_chain_file(dir + "/srv.pem");
    ctx_.use_private_key_file(dir + "/srv-key.pem", asio::ssl::context::pem);
    acceptor_.open(tcp::v4());
    acceptor_.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    acceptor_.listen();
    thread_ = std::thread([this] {
      while (true) {
        tcp::socket s(ioc_);
        boost::system::error_code ec;
        acceptor_.accept(s, ec);
        if (ec || stop_) return;
        ++accepted_;
        conns_.emplace_back([this, s = std::move(s)]() mutable {
          Stream stream(std::move(s), ctx_);
          boost::system::error_code e;
          if (handshake_) stream.handshake(asio::ssl::stream_base::server, e);
          if (!e) serve_(stream);
          stream.lowest_layer().close(e);
        });
      }
    });
  }
  ~RawTlsServer() {
    stop_ = true;
    tcp::socket s(ioc_);
    boost::system::error_code ec;
    s.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
    for (auto& t : conns_) t.join();
  }
  std::string Url(const std::string& path) const {
    return "https://localhost:" + std::to_string(acceptor_.local_endpoint().port()) + path;
  }
  int accepted() const { return accepted_; }

 private:
  asio::io_context ioc_;
  asio::ssl::context ctx_;
  tcp::acceptor acceptor_{ioc_};
  std::function<void(Stream&)> serve_;
  bool handshake_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
  std::vector<std::thread> conns_;
};

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new std::string(::testing::TempDir() + "/wisp-http-client-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*dir_);
    ASSERT_TRUE(testing::MakeTestPki(*dir_));
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(*dir_, ignored);
    delete dir_;
  }

  void StartServer(std::string client_ca = "") {
    auto s = Server::Create({.address = "127.0.0.1",
                             .port = 0,
                             .cert_file = *dir_ + "/srv.pem",
                             .key_file = *dir_ + "/srv-key.pem",
                             .client_ca_file = std::move(client_ca),
                             .max_body_bytes = 8 << 20,
                             .threads = 2,
                             .read_timeout = seconds(5),
                             .idle_timeout = seconds(30)});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    server_->Handle("GET", "/hello", [](const Request&) { return Response::Text(200, "hello"); });
    server_->Handle("GET", "/auth", [](const Request& r) {
      return Response::Text(r.Header("authorization") == "Bearer s3cret" ? 200 : 401, "auth");
    });
    server_->Handle("GET", "/big",
                    [](const Request&) { return Response::Text(200, std::string(3 << 20, 'b')); });
    server_->Handle("GET", "/boom", [](const Request&) { return Response::Error(500, "boom"); });
    server_->Handle("GET", "/redirect", [](const Request&) {
      Response r = Response::Text(302, "");
      r.headers.emplace_back("Location", "/hello");
      return r;
    });
    server_->Handle("GET", "/loop", [](const Request&) {
      Response r = Response::Text(307, "");
      r.headers.emplace_back("Location", "/loop");
      return r;
    });
    server_->Handle("GET", "/range", [](const Request& r) {
      // bytes=<first>-<last> of "0123456789"
      std::string range(r.Header("range"));
      const std::string all = "0123456789";
      if (range.rfind("bytes=", 0) != 0) return Response::Text(200, all);
      size_t dash = range.find('-');
      size_t first = std::stoul(range.substr(6, dash - 6));
      size_t last = dash + 1 < range.size() ? std::stoul(range.substr(dash + 1)) : 9;
      Response out = Response::Text(206, all.substr(first, last - first + 1));
      out.headers.emplace_back(
          "Content-Range", "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/10");
      return out;
    });
    server_->HandleAsync("GET", "/slow", [this](const Request&, Responder respond) {
      slow_.emplace_back([respond] {
        std::this_thread::sleep_for(seconds(2));
        respond(Response::Text(200, "late"));
      });
    });
    server_->HandleStream("PUT", "/upload/",
                          [this](const Request& r, BodyReader& body) {
                            if (r.path == "/upload/refuse") return Response::Error(401, "no");
                            std::string got;
                            char buf[65536];
                            while (true) {
                              auto n = body.Read(buf, sizeof buf);
                              if (!n.ok())
                                return Response::Error(400, std::string(n.status().message()));
                              if (*n == 0) break;
                              got.append(buf, *n);
                            }
                            uploaded_ = got;
                            return Response::Json(200,
                                                  "{\"len\":" + std::to_string(got.size()) + "}");
                          },
                          {.max_body_bytes = 64 << 20, .max_concurrent = 2});
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop(milliseconds(0));
    for (auto& t : slow_) t.join();
  }

  std::string Url(const std::string& path, const std::string& host = "localhost") const {
    return "https://" + host + ":" + std::to_string(server_->port()) + path;
  }
  ClientPtr Make(ClientOptions o = {}) {
    if (o.tls.ca_pem.empty() && o.tls.ca_file.empty() && !o.tls.system_roots) {
      o.tls.ca_file = *dir_ + "/ca.pem";
    }
    auto c = NewClient(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static std::string* dir_;
  ServerPtr server_;
  std::vector<std::thread> slow_;
  std::string uploaded_;
};
std::string* ClientTest::dir_ = nullptr;

// Tests that the CA can come as PEM text or a file, and that the system store alone refuses.
TEST_F(ClientTest, VerifiesAgainstTheGivenCa) {
  StartServer();
  auto by_file = Make()->Send({.url = Url("/hello")});
  ASSERT_TRUE(by_file.ok()) << by_file.status();
  EXPECT_EQ(by_file->status, 200);
  EXPECT_EQ(by_file->body, "hello");
  auto by_pem = Make({.tls = {.ca_pem = Slurp(*dir_ + "/ca.pem")}})->Send({.url = Url("/hello")});
  ASSERT_TRUE(by_pem.ok()) << by_pem.status();
  EXPECT_EQ(by_pem->body, "hello");
  auto system = Make({.tls = {.system_roots = true}})->Send({.url = Url("/hello")});
  ASSERT_FALSE(system.ok());
  EXPECT_EQ(system.status().code(), absl::StatusCode::kFailedPrecondition) << system.status();
  EXPECT_TRUE(Has(system.status(), "certificate verify failed")) << system.status();
  auto other = Make({.tls = {.ca_file = *dir_ + "/other.pem"}})->Send({.url = Url("/hello")});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
}

// Tests that bad TLS material is refused at NewClient, naming the field.
TEST_F(ClientTest, RefusesBadTlsMaterial) {
  auto bad_pem = NewClient({.tls = {.ca_pem = "not a pem"}});
  EXPECT_EQ(bad_pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(bad_pem.status(), "tls.ca_pem"));
  auto missing = NewClient({.tls = {.ca_file = "/nonexistent/ca.pem"}});
  EXPECT_TRUE(Has(missing.status(), "tls.ca_file"));
  auto half = NewClient({.tls = {.cert_file = *dir_ + "/cli.pem"}});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  auto mismatch = NewClient(
      {.tls = {.cert_pem = Slurp(*dir_ + "/cli.pem"), .key_pem = Slurp(*dir_ + "/str-key.pem")}});
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Has(mismatch.status(), "PRIVATE KEY"));
}

// Tests the name checks: a certificate for localhost does not pass for 127.0.0.1, unless
// server_name says which name to check (and send as SNI); a wrong server_name fails.
TEST_F(ClientTest, ChecksTheHostNameOrIp) {
  StartServer();
  auto by_ip = Make()->Send({.url = Url("/hello", "127.0.0.1")});
  ASSERT_FALSE(by_ip.ok());
  EXPECT_EQ(by_ip.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(by_ip.status(), "certificate verify failed")) << by_ip.status();
  auto named = Make({.tls = {.ca_file = *dir_ + "/ca.pem", .server_name = "localhost"}})
                   ->Send({.url = Url("/hello", "127.0.0.1")});
  ASSERT_TRUE(named.ok()) << named.status();
  auto wrong = Make({.tls = {.ca_file = *dir_ + "/ca.pem", .server_name = "wrong.example"}})
                   ->Send({.url = Url("/hello")});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(wrong.status(), "hostname mismatch")) << wrong.status();
}

// Tests mutual TLS: no certificate or one from another CA is Unauthenticated; ours passes.
TEST_F(ClientTest, PresentsAClientCertificate) {
  StartServer(*dir_ + "/ca.pem");
  auto none = Make()->Send({.url = Url("/hello")});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  auto stranger = Make({.tls = {.ca_file = *dir_ + "/ca.pem",
                                .cert_file = *dir_ + "/str.pem",
                                .key_file = *dir_ + "/str-key.pem"}})
                      ->Send({.url = Url("/hello")});
  ASSERT_FALSE(stranger.ok());
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kUnauthenticated) << stranger.status();
  auto ours = Make({.tls = {.ca_file = *dir_ + "/ca.pem",
                            .cert_pem = Slurp(*dir_ + "/cli.pem"),
                            .key_pem = Slurp(*dir_ + "/cli-key.pem")}})
                  ->Send({.url = Url("/hello")});
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ(ours->body, "hello");
}

// Tests that the bearer token is sent (client-wide or per request) and never shows in errors.
TEST_F(ClientTest, SendsTheBearerTokenAndKeepsItOutOfMessages) {
  StartServer();
  auto client = Make({.bearer_token = "s3cret"});
  EXPECT_EQ(client->Send({.url = Url("/auth")})->status, 200);
  auto per_request = Make();
  EXPECT_EQ(per_request->Send({.url = Url("/auth")})->status, 401);
  EXPECT_EQ(per_request->Send({.url = Url("/auth"), .bearer_token = "s3cret"})->status, 200);
  auto unauth = per_request->Send({.url = Url("/auth?token=s3cret")});
  ASSERT_TRUE(unauth.ok());
  absl::Status st = StatusOf(*unauth);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(st.message(), "HTTP 401 Unauthorized from " + Url("/auth"));
  const std::string url = Url("/auth?x=s3cret");
  server_.reset();  // closes the kept-alive connection and the port
  auto down = client->Send({.url = url, .bearer_token = "s3cret"});
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();
  EXPECT_FALSE(Has(down.status(), "s3cret")) << down.status();
}

// Tests the HTTP status mapping end to end (404, 500) and as a table.
TEST_F(ClientTest, MapsHttpStatusesOnce) {
  StartServer();
  auto client = Make();
  auto missing = client->Send({.url = Url("/nope?q=1")});
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(StatusOf(*missing), absl::NotFoundError("HTTP 404 Not Found from " + Url("/nope")));
  auto boom = client->Send({.url = Url("/boom")});
  ASSERT_TRUE(boom.ok());
  EXPECT_EQ(StatusOf(*boom).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(StatusOf(*client->Send({.url = Url("/hello")})).ok());
  const std::pair<int, absl::StatusCode> table[] = {
      {204, absl::StatusCode::kOk},
      {302, absl::StatusCode::kFailedPrecondition},
      {400, absl::StatusCode::kInvalidArgument},
      {401, absl::StatusCode::kUnauthenticated},
      {403, absl::StatusCode::kPermissionDenied},
      {404, absl::StatusCode::kNotFound},
      {408, absl::StatusCode::kDeadlineExceeded},
      {409, absl::StatusCode::kAborted},
      {410, absl::StatusCode::kNotFound},
      {412, absl::StatusCode::kFailedPrecondition},
      {416, absl::StatusCode::kOutOfRange},
      {422, absl::StatusCode::kFailedPrecondition},
      {429, absl::StatusCode::kResourceExhausted},
      {500, absl::StatusCode::kUnavailable},
      {501, absl::StatusCode::kUnimplemented},
      {503, absl::StatusCode::kUnavailable},
  };
  for (const auto& [http, code] : table) {
    SCOPED_TRACE(http);
    EXPECT_EQ(StatusOfHttp(http, "", "https://x/y").code(), code);
  }
}

// Tests that redirects are refused by default and followed when asked, up to the limit.
TEST_F(ClientTest, FollowsRedirectsOnlyWhenAsked) {
  StartServer();
  auto client = Make();
  auto refused = client->Send({.url = Url("/redirect")});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 302);
  EXPECT_EQ(StatusOf(*refused).code(), absl::StatusCode::kFailedPrecondition);
  auto followed = client->Send({.url = Url("/redirect"), .max_redirects = 1});
  ASSERT_TRUE(followed.ok()) << followed.status();
  EXPECT_EQ(followed->body, "hello");
  EXPECT_EQ(followed->url, Url("/hello"));
  auto loop = client->Send({.url = Url("/loop"), .max_redirects = 3});
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(loop.status(), "more than 3 redirects")) << loop.status();
}

// Tests the response size limit, against Content-Length before the body is read.
TEST_F(ClientTest, LimitsTheResponseSize) {
  StartServer();
  auto client = Make({.max_response_bytes = 1 << 20});
  auto big = client->Send({.url = Url("/big")});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(big.status(), "larger than 1048576 bytes")) << big.status();
  auto allowed = client->Send({.url = Url("/big"), .max_response_bytes = 4 << 20});
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(allowed->body.size(), 3u << 20);
}

// Tests the read deadline (a handler that answers after 2 s), the total deadline, and a TLS
// handshake that never comes (the connect deadline).
TEST_F(ClientTest, TimesOutWithDeadlineExceeded) {
  StartServer();
  auto client = Make({.read_timeout = milliseconds(300)});
  auto slow = client->Send({.url = Url("/slow")});
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kDeadlineExceeded) << slow.status();
  auto total = Make()->Send({.url = Url("/slow"), .total_timeout = milliseconds(400)});
  ASSERT_FALSE(total.ok());
  EXPECT_EQ(total.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Has(total.status(), "deadline of 400 ms passed")) << total.status();
  RawTlsServer mute(
      *dir_, [](RawTlsServer::Stream&) { std::this_thread::sleep_for(seconds(2)); },
      /*handshake=*/false);
  auto handshake = Make({.connect_timeout = milliseconds(300)})->Send({.url = mute.Url("/")});
  ASSERT_FALSE(handshake.ok());
  EXPECT_EQ(handshake.status().code(), absl::StatusCode::kDeadlineExceeded) << handshake.status();
  EXPECT_TRUE(Has(handshake.status(), "TLS handshake")) << handshake.status();
}

// Tests that a request's response_timeout, not read_timeout, bounds the wait for the answer once
// the request went out (an upload the server converts before answering).
TEST_F(ClientTest, ResponseTimeoutBoundsTheWaitForTheAnswer) {
  StartServer();
  auto client = Make({.read_timeout = milliseconds(300)});
  auto late = client->Send({.url = Url("/slow"), .response_timeout = seconds(10)});
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->body, "late");
  auto short_wait = client->Send({.url = Url("/slow"), .response_timeout = milliseconds(300)});
  ASSERT_FALSE(short_wait.ok());
  EXPECT_EQ(short_wait.status().code(), absl::StatusCode::kDeadlineExceeded) << short_wait.status();
  EXPECT_TRUE(Has(short_wait.status(), "waiting for the response timed out after 300 ms"))
      << short_wait.status();
}

// Tests that a refused connection and a body cut short are Unavailable.
TEST_F(ClientTest, ConnectionFailuresAreUnavailable) {
  uint16_t closed_port = 0;
  {
    asio::io_context ioc;
    tcp::acceptor a(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    closed_port = a.local_endpoint().port();
  }
  auto refused = Make()->Send({.url = "https://localhost:" + std::to_string(closed_port) + "/"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  RawTlsServer cut(*dir_, [](RawTlsServer::Stream& s) {
    boost::beast::flat_buffer buf;
    bhttp::request<bhttp::string_body> req;
    boost::system::error_code ec;
    bhttp::read(s, buf, req, ec);
    asio::write(s,
                asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n") +
                             std::string(400, 'x')),
                ec);
  });
  auto truncated = Make()->Send({.url = cut.Url("/x")});
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Has(truncated.status(), "HTTP body truncated: received 400 of 1000 bytes"))
      << truncated.status();
}

// Tests Range requests: the header sent and the Content-Range parsed.
TEST_F(ClientTest, AsksForRanges) {
  StartServer();
  auto client = Make();
  auto part = client->Send({.url = Url("/range"), .range_start = 3, .range_end = 5});
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, "345");
  ASSERT_TRUE(part->content_range);
  EXPECT_EQ(part->content_range->first, 3u);
  EXPECT_EQ(part->content_range->last, 5u);
  EXPECT_EQ(part->content_range->total, 10u);
  auto tail = client->Send({.url = Url("/range"), .range_start = 7});
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->body, "789");
}

// Tests that a downloaded body is pulled into the caller's buffer and arrives whole.
TEST_F(ClientTest, StreamsADownload) {
  StartServer();
  auto stream = Make()->Open({.url = Url("/big")});
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->response().status, 200);
  EXPECT_EQ((*stream)->response().content_length, 3u << 20);
  std::vector<char> buf(100000);
  uint64_t total = 0;
  bool all_b = true;
  while (true) {
    auto got = (*stream)->Read(buf.data(), buf.size());
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got == 0) break;
    for (size_t i = 0; i < *got; ++i) all_b &= buf[i] == 'b';
    total += *got;
  }
  EXPECT_EQ(total, 3u << 20);
  EXPECT_TRUE(all_b);
}

// Tests uploads from a reader: with a size (Content-Length), without (chunked), and with
// Expect: 100-continue refused before any body byte is pulled.
TEST_F(ClientTest, StreamsAnUpload) {
  StartServer();
  auto client = Make();
  const uint64_t size = 5 << 20;
  for (bool sized : {true, false}) {
    SCOPED_TRACE(sized);
    uint64_t produced = 0;
    ClientRequest req{.method = "PUT", .url = Url("/upload/x")};
    req.body_reader = [&](char* buf, size_t n) -> absl::StatusOr<size_t> {
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, size - produced));
      for (size_t i = 0; i < k; ++i) buf[i] = static_cast<char>('a' + (produced + i) % 26);
      produced += k;
      return k;
    };
    if (sized) req.body_size = size;
    req.expect_continue = sized;
    auto r = client->Send(req);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, "{\"len\":" + std::to_string(size) + "}");
    ASSERT_EQ(uploaded_.size(), size);
    EXPECT_EQ(uploaded_[size - 1], static_cast<char>('a' + (size - 1) % 26));
  }
  bool pulled = false;
  ClientRequest refuse{.method = "PUT", .url = Url("/upload/refuse")};
  refuse.body_reader = [&](char*, size_t) -> absl::StatusOr<size_t> {
    pulled = true;
    return 0;
  };
  refuse.body_size = 100;
  refuse.expect_continue = true;
  auto r = client->Send(refuse);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 401);
  EXPECT_FALSE(pulled);
}

// Tests a watch-like stream: lines that trickle in for about 3 s, each read within the read
// deadline and no total deadline; with a total deadline the same stream is cut.
TEST_F(ClientTest, ReadsALongStreamLineByLine) {
  RawTlsServer trickle(*dir_, [](RawTlsServer::Stream& s) {
    boost::beast::flat_buffer buf;
    bhttp::request<bhttp::string_body> req;
    boost::system::error_code ec;
    bhttp::read(s, buf, req, ec);
    asio::write(
        s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")), ec);
    for (int i = 0; i < 6 && !ec; ++i) {
      std::this_thread::sleep_for(milliseconds(500));
      std::string line = "{\"type\":\"ADDED\",\"n\":" + std::to_string(i) + "}\n";
      std::ostringstream chunk;
      chunk << std::hex << line.size() << "\r\n" << line << "\r\n";
      asio::write(s, asio::buffer(chunk.str()), ec);
    }
    asio::write(s, asio::buffer(std::string("0\r\n\r\n")), ec);
  });
  auto client = Make({.read_timeout = seconds(2)});
  const auto start = std::chrono::steady_clock::now();
  auto watch = client->Open({.url = trickle.Url("/api/v1/pods?watch=1")});
  ASSERT_TRUE(watch.ok()) << watch.status();
  std::vector<std::string> lines;
  while (true) {
    auto line = (*watch)->ReadLine();
    ASSERT_TRUE(line.ok()) << line.status();
    if (!*line) break;
    lines.push_back(**line);
  }
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[5], "{\"type\":\"ADDED\",\"n\":5}");
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(2900));

  auto cut = client->Open({.url = trickle.Url("/w"), .total_timeout = milliseconds(1200)});
  ASSERT_TRUE(cut.ok()) << cut.status();
  absl::Status end;
  for (int i = 0; i < 10 && end.ok(); ++i) end = (*cut)->ReadLine().status();
  EXPECT_EQ(end.code(), absl::StatusCode::kDeadlineExceeded) << end;
}

// Tests that sequential requests to one host reuse one kept-alive connection.
TEST_F(ClientTest, ReusesConnections) {
  RawTlsServer keep(*dir_, [](RawTlsServer::Stream& s) {
    boost::beast::flat_buffer buf;
    for (int i = 0; i < 10; ++i) {
      bhttp::request<bhttp::string_body> req;
      boost::system::error_code ec;
      bhttp::read(s, buf, req, ec);
      if (ec) return;
      bhttp::response<bhttp::string_body> res{bhttp::status::ok, 11};
      res.body() = "n" + std::to_string(i);
      res.prepare_payload();
      bhttp::write(s, res, ec);
    }
  });
  auto client = Make();
  for (int i = 0; i < 3; ++i) {
    auto r = client->Send({.url = keep.Url("/k")});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "n" + std::to_string(i));
  }
  EXPECT_EQ(keep.accepted(), 1);
}

}  // namespace
}  // namespace wisp::http
