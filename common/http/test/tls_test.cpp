// The server's TLS connections (OpenSSL on the non-blocking socket, see src/tls_stream.hpp),
// against asio's and Beast's own TLS client: bodies of many records both ways, an answer larger
// than the socket takes at once, pipelined requests, a request trickling in a byte per record,
// clients that go silent or away, and the streaming path's asynchronous reads over TLS.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "wisp/http/server.hpp"

#include "body_sum.hpp"

namespace wisp::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using TlsClient = beast::ssl_stream<beast::tcp_stream>;

std::string Pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + seed);
  return s;
}

using test_support::Sum;

std::string Serialize(const std::string& method, const std::string& target,
                      const std::string& body) {
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  req.set(bhttp::field::host, "localhost");
  req.body() = body;
  req.prepare_payload();
  std::ostringstream out;
  out << req;
  return out.str();
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs each test of this suite as a process of its own, in parallel, and
    // one must not rewrite the key another is loading.
    dir_ =
        new std::string(testing::TempDir() + "/wisp-http-tls-stream-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*dir_);
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
        "-subj /CN=localhost -keyout " +
        *dir_ + "/key.pem -out " + *dir_ + "/cert.pem 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(*dir_, ignored);
    delete dir_;
    dir_ = nullptr;
  }

  // A TLS server with /echo (length and byte sum of the body) and /big (an answer of `big_`
  // bytes); with `streaming`, also the streaming route PUT /v1/upload/.
  void Start(bool streaming) {
    auto s = Server::Create({.address = "127.0.0.1",
                             .port = 0,
                             .cert_file = *dir_ + "/cert.pem",
                             .key_file = *dir_ + "/key.pem",
                             .max_body_bytes = 8 << 20,
                             .threads = 2,
                             .read_timeout = std::chrono::seconds(1),
                             .idle_timeout = std::chrono::seconds(1)});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    server_->Handle("POST", "/echo", [](const Request& r) {
      return Response::Json(200, "{\"len\":" + std::to_string(r.body.size()) +
                                     ",\"sum\":" + std::to_string(Sum(r.body)) + "}");
    });
    server_->Handle("GET", "/big", [this](const Request&) { return Response::Text(200, big_); });
    if (streaming) {
      server_->HandleStream("PUT", "/v1/upload/",
                            [this](const Request&, BodyReader& body) {
                              auto got = test_support::SumBody(body);
                              if (!got.ok()) {
                                std::lock_guard lock(mu_);
                                stream_error_ = got.status();
                                return Response::Error(400, std::string(got.status().message()));
                              }
                              return Response::Json(
                                  200, "{\"len\":" + std::to_string(got->len) +
                                           ",\"sum\":" + std::to_string(got->sum) + "}");
                            },
                            {.max_body_bytes = 8 << 20, .max_concurrent = 2});
    }
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<TlsClient> Connect() {
    auto stream = std::make_unique<TlsClient>(ioc_, client_ctx_);
    beast::get_lowest_layer(*stream).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    stream->handshake(asio::ssl::stream_base::client);
    return stream;
  }

  bhttp::response<bhttp::string_body> Read(TlsClient& stream) {
    bhttp::response<bhttp::string_body> res;
    bhttp::read(stream, buf_, res);
    return res;
  }

  // The status of one /echo request on a new connection: 200 while the server serves.
  unsigned EchoStatus() {
    auto stream = Connect();
    asio::write(*stream, asio::buffer(Serialize("POST", "/echo", "ok")));
    return Read(*stream).result_int();
  }

  // Whether the server closed `socket` within `within` (reading it gives an error or EOF).
  static bool ClosedWithin(tcp::socket& socket, std::chrono::seconds within) {
    auto closed = std::async(std::launch::async, [&] {
      char byte = 0;
      beast::error_code ec;
      while (!ec) socket.read_some(asio::buffer(&byte, 1), ec);
      return true;
    });
    if (closed.wait_for(within) == std::future_status::ready) return closed.get();
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);  // lets the reader return
    closed.get();
    return false;
  }

  static std::string* dir_;
  asio::io_context ioc_;
  asio::ssl::context client_ctx_{asio::ssl::context::tls_client};
  beast::flat_buffer buf_;
  ServerPtr server_;
  std::string big_ = Pattern(4 << 20, 5);
  std::mutex mu_;
  std::optional<absl::Status> stream_error_;
};
std::string* TlsTest::dir_ = nullptr;

// Tests a body of many TLS records in, an answer larger than the socket buffers out (the client
// reads it only after a pause, so the server's writes stop and resume), and the same connection
// serving the next request after both.
TEST_F(TlsTest, LargeBodiesBothWays) {
  Start(false);
  auto stream = Connect();
  const std::string body = Pattern(5 << 20, 9);
  asio::write(*stream, asio::buffer(Serialize("POST", "/echo", body)));
  auto res = Read(*stream);
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res.body(), "{\"len\":" + std::to_string(body.size()) +
                            ",\"sum\":" + std::to_string(Sum(body)) + "}");

  bhttp::request<bhttp::empty_body> get{bhttp::verb::get, "/big", 11};
  bhttp::write(*stream, get);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto big = Read(*stream);
  EXPECT_EQ(big.result_int(), 200u);
  EXPECT_EQ(big.body().size(), big_.size());
  EXPECT_TRUE(big.body() == big_);

  bhttp::request<bhttp::string_body> again{bhttp::verb::post, "/echo", 11};
  again.body() = "abc";
  again.prepare_payload();
  bhttp::write(*stream, again);
  EXPECT_EQ(Read(*stream).body(), "{\"len\":3,\"sum\":294}");
}

// Tests that requests sent back to back in one TLS write are each answered, in order.
TEST_F(TlsTest, PipelinedRequestsInOneWrite) {
  Start(false);
  auto stream = Connect();
  std::string both;
  for (int i = 1; i <= 3; ++i) both += Serialize("POST", "/echo", std::string(i * 1000, 'a'));
  asio::write(*stream, asio::buffer(both));
  for (int i = 1; i <= 3; ++i) {
    auto res = Read(*stream);
    EXPECT_EQ(res.body(), "{\"len\":" + std::to_string(i * 1000) +
                              ",\"sum\":" + std::to_string(i * 1000 * 97) + "}");
  }
}

// Tests a request that arrives one byte per TLS record, with pauses: the server parses what each
// record brings and waits for the next.
TEST_F(TlsTest, RequestTricklingInByteByByte) {
  Start(false);
  auto stream = Connect();
  const std::string request = Serialize("POST", "/echo", "hello, slowly");
  for (size_t i = 0; i < request.size(); ++i) {
    asio::write(*stream, asio::buffer(&request[i], 1));
    if (i % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(Read(*stream).body(), "{\"len\":13,\"sum\":1290}");
}

// Tests that the server closes, within its read timeout (1 s here), a connection that never
// starts the handshake, one that handshakes and sends nothing, one that stops in the middle of a
// request, and one that stays idle after an answer; and that it serves on afterwards.
TEST_F(TlsTest, SilentClientsTimeOut) {
  Start(false);
  {
    tcp::socket raw(ioc_);
    raw.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    EXPECT_TRUE(ClosedWithin(raw, std::chrono::seconds(5))) << "no handshake";
  }
  {
    auto stream = Connect();
    EXPECT_TRUE(ClosedWithin(beast::get_lowest_layer(*stream).socket(), std::chrono::seconds(5)))
        << "handshake, then nothing";
  }
  {
    auto stream = Connect();
    const std::string request = Serialize("POST", "/echo", std::string(100, 'x'));
    asio::write(*stream, asio::buffer(request.data(), request.size() / 2));
    EXPECT_TRUE(ClosedWithin(beast::get_lowest_layer(*stream).socket(), std::chrono::seconds(5)))
        << "half a request";
  }
  {
    auto stream = Connect();
    asio::write(*stream, asio::buffer(Serialize("POST", "/echo", "x")));
    EXPECT_EQ(Read(*stream).result_int(), 200u);
    EXPECT_TRUE(ClosedWithin(beast::get_lowest_layer(*stream).socket(), std::chrono::seconds(5)))
        << "idle after an answer";
  }
  EXPECT_EQ(EchoStatus(), 200u);
}

// Tests that a client going away in the middle of a body, or in the middle of an answer it asked
// for, costs the server nothing: the next connection is served.
TEST_F(TlsTest, ClientsLeavingMidwayAreForgotten) {
  Start(false);
  {
    auto stream = Connect();
    const std::string request = Serialize("POST", "/echo", Pattern(1 << 20, 1));
    asio::write(*stream, asio::buffer(request.data(), request.size() / 3));
    beast::get_lowest_layer(*stream).socket().close();
  }
  {
    auto stream = Connect();
    asio::write(*stream, asio::buffer(Serialize("GET", "/big", "")));
    char some[1000];
    stream->read_some(asio::buffer(some));
    beast::get_lowest_layer(*stream).socket().close();  // with most of the answer unread
  }
  EXPECT_EQ(EchoStatus(), 200u);
}

// Tests that a client sending the TLS port plain HTTP, bytes that are no TLS record, or a record
// holding no valid handshake message is closed at once (the handshake fails; no read timeout is
// waited out), and that the server serves on.
TEST_F(TlsTest, NonTlsClientsAreClosedAtOnce) {
  Start(false);
  for (const std::string& bytes : {Serialize("POST", "/echo", "plain"), std::string(5000, '\x16'),
                                   std::string("\x16\x03\x01\x00\x04\x63\x00\x00\x00", 9)}) {
    tcp::socket raw(ioc_);
    raw.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    asio::write(raw, asio::buffer(bytes));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(ClosedWithin(raw, std::chrono::seconds(5)));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900))
        << "closed only by the read timeout";
  }
  EXPECT_EQ(EchoStatus(), 200u);
}

// Tests the streaming route over TLS (the asynchronous reads): a multi-MiB upload arrives whole,
// the connection then serves a plain request, and an upload that stalls fails the handler's read
// with DeadlineExceeded after the read timeout.
TEST_F(TlsTest, StreamsUploadsOverTls) {
  Start(true);
  auto stream = Connect();
  const std::string body = Pattern(3 << 20, 3);
  bhttp::request<bhttp::string_body> put{bhttp::verb::put, "/v1/upload/v-1", 11};
  put.body() = body;
  put.prepare_payload();
  bhttp::write(*stream, put);
  EXPECT_EQ(Read(*stream).body(), "{\"len\":" + std::to_string(body.size()) +
                                      ",\"sum\":" + std::to_string(Sum(body)) + "}");
  asio::write(*stream, asio::buffer(Serialize("POST", "/echo", "abc")));
  EXPECT_EQ(Read(*stream).body(), "{\"len\":3,\"sum\":294}");

  auto stalled = Connect();
  bhttp::request<bhttp::empty_body> head{bhttp::verb::put, "/v1/upload/v-2", 11};
  head.content_length(1 << 20);
  bhttp::write(*stalled, head);
  asio::write(*stalled, asio::buffer(Pattern(100000, 4)));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::optional<absl::Status> err;
  while (!err && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard lock(mu_);
    err = stream_error_;
  }
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code(), absl::StatusCode::kDeadlineExceeded) << *err;
  EXPECT_NE(err->message().find("after 100000 bytes"), std::string::npos) << *err;
}

}  // namespace
}  // namespace wisp::http
