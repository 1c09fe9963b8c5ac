#include "wisp/http/server.hpp"

#include "body_sum.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace wisp::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Got {
  int status = 0;
  std::string body;
};

template <typename Stream>
Got Exchange(Stream& stream, const std::string& method, const std::string& target,
             const std::string& body) {
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  req.set(bhttp::field::host, "localhost");
  req.body() = body;
  req.prepare_payload();
  bhttp::write(stream, req);
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

// A plain-HTTP connection to the server on 127.0.0.1, kept alive across requests.
struct Connection {
  explicit Connection(uint16_t port) {
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  Got Send(const std::string& method, const std::string& target, const std::string& body = "") {
    return Exchange(stream, method, target, body);
  }
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
};

Got Plain(uint16_t port, const std::string& method, const std::string& target,
          const std::string& body = "") {
  return Connection(port).Send(method, target, body);
}

class ServerTest : public ::testing::Test {
 protected:
  void StartWith(ServerOptions options) {
    auto s = Server::Create(std::move(options));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    server_->Handle("POST", "/echo", [](const Request& r) {
      return Response::Json(200, "{\"len\":" + std::to_string(r.body.size()) + ",\"q\":\"" +
                                     r.Query("timeout").value_or("") + "\",\"ct\":\"" +
                                     std::string(r.Header("content-type")) + "\"}");
    });
    server_->HandlePrefix("GET", "/v1/upload/", [](const Request& r) {
      return Response::Text(200, r.path.substr(std::string("/v1/upload/").size()));
    });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  ServerPtr server_;
};

// Tests that a handler sees the raw body and decoded query parameters.
TEST_F(ServerTest, DispatchesToHandler) {
  StartWith({.address = "127.0.0.1", .port = 0});
  auto got = Plain(server_->port(), "POST", "/echo?timeout=10s%20x", "hello");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "{\"len\":5,\"q\":\"10s x\",\"ct\":\"\"}");
  got = Plain(server_->port(), "GET", "/v1/upload/vol-1");
  EXPECT_EQ(got.body, "vol-1");
}

// Tests that unknown paths, wrong methods and oversized bodies get JSON errors, not a crash.
TEST_F(ServerTest, RejectsWhatItCannotServe) {
  StartWith({.address = "127.0.0.1", .port = 0, .max_body_bytes = 16});
  EXPECT_EQ(Plain(server_->port(), "GET", "/nope").status, 404);
  EXPECT_EQ(Plain(server_->port(), "GET", "/echo").status, 405);
  auto got = Plain(server_->port(), "POST", "/echo", std::string(17, 'x'));
  EXPECT_EQ(got.status, 413);
  EXPECT_NE(got.body.find("larger than 16 bytes"), std::string::npos);
  // The server still serves after the refusals.
  EXPECT_EQ(Plain(server_->port(), "POST", "/echo", "ok").status, 200);
}

// Tests that a malformed request line is answered 400.
TEST_F(ServerTest, MalformedRequestIs400) {
  StartWith({.address = "127.0.0.1", .port = 0});
  asio::io_context ioc;
  tcp::socket sock(ioc);
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
  asio::write(sock, asio::buffer(std::string("GARBAGE\r\n\r\n")));
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  beast::error_code ec;
  bhttp::read(sock, buf, res, ec);
  EXPECT_EQ(res.result_int(), 400u);
}

// Tests that the server speaks HTTP over a unix socket with the requested mode.
TEST_F(ServerTest, ServesUnixSocket) {
  const std::string path = testing::TempDir() + "/wisp-http-test.sock";
  std::ofstream(path) << "stale";  // a stale non-socket file must not be silently removed
  std::filesystem::remove(path);
  StartWith({.unix_socket = path, .socket_mode = 0660});
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms(0660));
  asio::io_context ioc;
  beast::basic_stream<asio::local::stream_protocol> stream(ioc);
  stream.connect(asio::local::stream_protocol::endpoint(path));
  auto got = Exchange(stream, "POST", "/echo", "abc");
  EXPECT_EQ(got.status, 200);
}

// Tests TLS serving, TLS 1.1 refusal, and certificate reload without a restart.
TEST_F(ServerTest, ServesTlsAndReloadsCertificate) {
  const std::string dir = testing::TempDir() + "/wisp-http-tls";
  std::filesystem::create_directories(dir);
  auto make_cert = [&](const std::string& cn) {
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=" +
        cn + " -keyout " + dir + "/key.pem -out " + dir + "/cert.pem 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  };
  make_cert("first");
  StartWith({.address = "127.0.0.1",
             .port = 0,
             .cert_file = dir + "/cert.pem",
             .key_file = dir + "/key.pem",
             .cert_reload_interval = std::chrono::seconds(0)});
  auto subject_cn = [&](int max_version) -> std::string {
    asio::io_context ioc;
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    SSL_CTX_set_max_proto_version(ctx.native_handle(), max_version);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    beast::get_lowest_layer(stream).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    beast::error_code ec;
    stream.handshake(asio::ssl::stream_base::client, ec);
    if (ec) return "handshake failed";
    X509* cert = SSL_get_peer_certificate(stream.native_handle());
    char name[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, sizeof(name));
    X509_free(cert);
    EXPECT_EQ(Exchange(stream, "POST", "/echo", "x").status, 200);
    return name;
  };
  EXPECT_EQ(subject_cn(TLS1_3_VERSION), "first");
  EXPECT_EQ(subject_cn(TLS1_1_VERSION), "handshake failed");
  make_cert("second");
  EXPECT_EQ(subject_cn(TLS1_2_VERSION), "second");
}

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Server::Create(
        {.address = "127.0.0.1", .port = 0, .read_timeout = std::chrono::seconds(2)});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    server_->Handle("POST", "/echo", [](const Request& r) {
      return Response::Json(200, "{\"len\":" + std::to_string(r.body.size()) + "}");
    });
    server_->HandleStream(
        "PUT", "/v1/upload/",
        [this](const Request& r, BodyReader& body) {
          if (r.Header("authorization") != "Bearer good") return Response::Error(401, "no token");
          auto got = test_support::SumBody(body);
          if (!got.ok()) {
            std::lock_guard lock(mu_);
            last_error_ = got.status();
            return Response::Error(400, std::string(got.status().message()));
          }
          return Response::Json(
              200, "{\"len\":" + std::to_string(got->len) + ",\"sum\":" + std::to_string(got->sum) +
                       ",\"cl\":" + std::to_string(body.content_length().value_or(0)) + "}");
        },
        {.max_body_bytes = 8 << 20, .max_concurrent = 2});
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(); }
  std::optional<absl::Status> LastError() {
    std::lock_guard lock(mu_);
    return last_error_;
  }

  ServerPtr server_;
  std::mutex mu_;
  std::optional<absl::Status> last_error_;
};

std::string Body(size_t n) {
  std::string body(n, '\0');
  for (size_t i = 0; i < n; ++i) body[i] = static_cast<char>(i * 7 + 3);
  return body;
}

using test_support::Sum;

// Tests that a streaming handler pulls a multi-MiB body, with Content-Length and chunked, and
// that the connection serves the next (synchronous) request after it.
TEST_F(StreamTest, StreamsBodyToHandler) {
  const std::string body = Body(5 << 20);
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
  bhttp::request<bhttp::string_body> req{bhttp::verb::put, "/v1/upload/v-1", 11};
  req.set(bhttp::field::authorization, "Bearer good");
  req.body() = body;
  req.prepare_payload();
  beast::error_code wec;
  bhttp::write(stream, req, wec);
  ASSERT_FALSE(wec) << wec.message() << " " << (LastError() ? LastError()->ToString() : "");
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res.body(), "{\"len\":" + std::to_string(body.size()) +
                            ",\"sum\":" + std::to_string(Sum(body)) +
                            ",\"cl\":" + std::to_string(body.size()) + "}");
  // Chunked, on the same connection.
  bhttp::request<bhttp::string_body> chunked{bhttp::verb::put, "/v1/upload/v-1", 11};
  chunked.set(bhttp::field::authorization, "Bearer good");
  chunked.body() = body.substr(0, 300000);
  chunked.chunked(true);
  bhttp::write(stream, chunked);
  bhttp::response<bhttp::string_body> res2;
  bhttp::read(stream, buf, res2);
  EXPECT_EQ(res2.result_int(), 200u);
  EXPECT_EQ(res2.body(), "{\"len\":300000,\"sum\":" + std::to_string(Sum(body.substr(0, 300000))) +
                             ",\"cl\":0}");
  EXPECT_EQ(Exchange(stream, "POST", "/echo", "abc").body, "{\"len\":3}");
}

// Tests that a handler refusing before reading answers a client that waits for 100-continue
// without the client sending the body, that a Content-Length over the limit is 413, and that the
// other method on a streaming path is 405.
TEST_F(StreamTest, RefusesBeforeTheBody) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
  bhttp::request<bhttp::empty_body> req{bhttp::verb::put, "/v1/upload/v-1", 11};
  req.set(bhttp::field::expect, "100-continue");
  req.content_length(1 << 20);
  bhttp::write(stream, req);  // headers only
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  EXPECT_EQ(res.result_int(), 401u);
  EXPECT_EQ(res.body(), "{\"error\":\"no token\"}");

  beast::tcp_stream big(ioc);
  big.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
  bhttp::request<bhttp::empty_body> too_big{bhttp::verb::put, "/v1/upload/v-1", 11};
  too_big.set(bhttp::field::authorization, "Bearer good");
  too_big.content_length(9 << 20);
  bhttp::write(big, too_big);
  bhttp::response<bhttp::string_body> res413;
  bhttp::read(big, buf, res413);
  EXPECT_EQ(res413.result_int(), 413u);
  EXPECT_EQ(Plain(server_->port(), "GET", "/v1/upload/v-1").status, 405);
}

// Tests that a client that sends a whole body without waiting still reads a refusal (the server
// drains the unread body instead of resetting the connection).
TEST_F(StreamTest, RefusalReachesAClientStillSending) {
  auto got = Plain(server_->port(), "PUT", "/v1/upload/v-1", Body(4 << 20));
  EXPECT_EQ(got.status, 401);
  EXPECT_EQ(got.body, "{\"error\":\"no token\"}");
}

// Tests that 100-continue is sent when the handler starts reading, and the upload then completes.
TEST_F(StreamTest, AnswersExpectContinue) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
  bhttp::request<bhttp::empty_body> req{bhttp::verb::put, "/v1/upload/v-1", 11};
  req.set(bhttp::field::expect, "100-continue");
  req.set(bhttp::field::authorization, "Bearer good");
  req.content_length(4);
  bhttp::write(stream, req);
  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::empty_body> cont;
  bhttp::read_header(stream, buf, cont);
  EXPECT_EQ(cont.get().result_int(), 100u);
  asio::write(stream, asio::buffer(std::string("abcd")));
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res.body(), "{\"len\":4,\"sum\":394,\"cl\":4}");
}

// Tests that a client that goes away mid-body makes the handler's Read fail with Unavailable, and a
// client that stalls makes it fail with DeadlineExceeded; neither hangs the handler.
TEST_F(StreamTest, ReportsDisconnectAndStall) {
  for (bool stall : {false, true}) {
    SCOPED_TRACE(stall ? "stall" : "disconnect");
    {
      std::lock_guard lock(mu_);
      last_error_.reset();
    }
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    bhttp::request<bhttp::empty_body> req{bhttp::verb::put, "/v1/upload/v-1", 11};
    req.set(bhttp::field::authorization, "Bearer good");
    req.content_length(1 << 20);
    bhttp::write(stream, req);
    asio::write(stream, asio::buffer(Body(100000)));
    if (!stall) stream.close();
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!LastError() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto err = LastError();
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->code(),
              stall ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable)
        << *err;
    EXPECT_NE(err->message().find("after 100000 bytes"), std::string::npos) << *err;
  }
}

// Tests that asynchronous handlers answer from another thread, later and in any order: more
// requests are in flight than the server has threads, a keep-alive connection goes on after an
// async answer, and a handler that drops its Responder or throws gives a 500 instead of a hang.
TEST(AsyncServerTest, AnswersFromAnyThreadBeyondThePoolSize) {
  auto created = Server::Create({.address = "127.0.0.1", .port = 0, .threads = 1});
  ASSERT_TRUE(created.ok()) << created.status();
  ServerPtr server = std::move(*created);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, Responder>> parked;
  server->HandleAsync("POST", "/later", [&](const Request& r, Responder done) {
    std::lock_guard lock(mu);
    parked.emplace_back(r.body, std::move(done));
    cv.notify_all();
  });
  server->HandleAsync("POST", "/drop", [](const Request&, Responder) {});
  server->HandleAsync("POST", "/throw",
                      [](const Request&, Responder) -> void { throw std::runtime_error("boom"); });
  ASSERT_TRUE(server->Start().ok());

  constexpr int kClients = 8;  // all parked at once on a one-thread server
  std::vector<std::future<Got>> got;
  for (int i = 0; i < kClients; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] {
      return Plain(server->port(), "POST", "/later", "req-" + std::to_string(i));
    }));
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] {
      return parked.size() == kClients;
    })) << parked.size();
  }
  std::thread answerer([&] {
    for (auto it = parked.rbegin(); it != parked.rend(); ++it) {
      it->second(Response::Json(200, "{\"echo\":\"" + it->first + "\"}"));
      it->second(Response::Json(500, "{}"));  // a second answer is ignored
    }
  });
  answerer.join();
  for (int i = 0; i < kClients; ++i) {
    Got g = got[i].get();
    EXPECT_EQ(g.status, 200);
    EXPECT_EQ(g.body, "{\"echo\":\"req-" + std::to_string(i) + "\"}");
  }

  Connection conn(server->port());
  Got dropped = conn.Send("POST", "/drop");
  EXPECT_EQ(dropped.status, 500);
  EXPECT_EQ(dropped.body, "{\"error\":\"the handler did not answer\"}");
  Got thrown = conn.Send("POST", "/throw");  // same connection: kept alive
  EXPECT_EQ(thrown.status, 500);
  EXPECT_EQ(thrown.body, "{\"error\":\"internal error\"}");
  server->Stop();
}

// Tests that a synchronous handler that blocks holds a worker, not the I/O thread: on a server with
// one I/O thread and one worker, other connections are still served while it blocks, and a
// synchronous handler that throws is answered 500 on a connection kept alive.
TEST(AsyncServerTest, BlockingSyncHandlerLeavesOtherConnectionsServed) {
  auto created = Server::Create({.address = "127.0.0.1", .port = 0, .threads = 1});
  ASSERT_TRUE(created.ok()) << created.status();
  ServerPtr server = std::move(*created);
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  server->Handle("POST", "/slow", [&](const Request&) {
    entered.set_value();
    released.wait();
    return Response::Json(200, "{\"slow\":true}");
  });
  server->Handle("POST", "/throw",
                 [](const Request&) -> Response { throw std::runtime_error("boom"); });
  server->HandleAsync("POST", "/fast", [](const Request& r, Responder done) {
    done(Response::Json(200, "{\"fast\":\"" + r.body + "\"}"));
  });
  ASSERT_TRUE(server->Start().ok());

  auto slow =
      std::async(std::launch::async, [&] { return Plain(server->port(), "POST", "/slow"); });
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  for (int i = 0; i < 3; ++i) {  // new connections, all on the one I/O thread
    auto fast = std::async(std::launch::async, [&, i] {
      return Plain(server->port(), "POST", "/fast", std::to_string(i));
    });
    ASSERT_EQ(fast.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "the blocked synchronous handler stalled the I/O thread";
    EXPECT_EQ(fast.get().body, "{\"fast\":\"" + std::to_string(i) + "\"}");
  }
  release.set_value();
  Got got = slow.get();
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "{\"slow\":true}");

  Connection conn(server->port());
  Got thrown = conn.Send("POST", "/throw");
  EXPECT_EQ(thrown.status, 500);
  EXPECT_EQ(thrown.body, "{\"error\":\"internal error\"}");
  EXPECT_EQ(conn.Send("POST", "/fast", "again").status, 200);  // same connection
  server->Stop();
}

// Tests that a Responder called after the server stopped is dropped, not a crash.
TEST(AsyncServerTest, AnswerAfterStopIsDropped) {
  auto created = Server::Create({.address = "127.0.0.1", .port = 0, .threads = 1});
  ASSERT_TRUE(created.ok());
  ServerPtr server = std::move(*created);
  std::promise<Responder> parked;
  server->HandleAsync("POST", "/later",
                      [&](const Request&, Responder done) { parked.set_value(std::move(done)); });
  ASSERT_TRUE(server->Start().ok());
  auto client = std::async(std::launch::async, [&] {
    try {
      return Plain(server->port(), "POST", "/later").status;
    } catch (const std::exception&) {
      return -1;  // the connection went away unanswered
    }
  });
  Responder done = parked.get_future().get();
  server->Stop(std::chrono::milliseconds(50));
  server.reset();
  done(Response::Json(200, "{}"));
  EXPECT_EQ(client.get(), -1);
}

// Tests that listen addresses parse, and bad ones are refused naming the setting.
// Tests that Stop() closes a TLS connection kept alive between requests at once, rather than
// waiting out its grace for a client with nothing more to send (kube-apiserver keeps its webhook
// connections open), and that a request in progress is still answered.
TEST(ServerStopTest, ClosesIdleConnectionsAndFinishesBusyOnes) {
  const std::string dir = testing::TempDir() + "/wisp-http-stop";
  std::filesystem::create_directories(dir);
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
      "-subj /CN=localhost -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto created = Server::Create({.address = "127.0.0.1",
                                 .port = 0,
                                 .cert_file = dir + "/cert.pem",
                                 .key_file = dir + "/key.pem",
                                 .threads = 2});
  ASSERT_TRUE(created.ok()) << created.status();
  ServerPtr server = std::move(*created);
  server->Handle("POST", "/echo", [](const Request&) { return Response::Json(200, "{}"); });
  std::promise<Responder> parked;
  server->HandleAsync("POST", "/later",
                      [&](const Request&, Responder done) { parked.set_value(std::move(done)); });
  ASSERT_TRUE(server->Start().ok());

  asio::io_context ioc;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  auto connect = [&](beast::ssl_stream<beast::tcp_stream>& stream) {
    beast::get_lowest_layer(stream).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->port()));
    stream.handshake(asio::ssl::stream_base::client);
  };
  beast::ssl_stream<beast::tcp_stream> idle(ioc, ctx);
  connect(idle);
  ASSERT_EQ(Exchange(idle, "POST", "/echo", "x").status, 200);  // now waiting for its next request
  auto busy = std::async(std::launch::async, [&] {
    asio::io_context busy_ioc;
    beast::ssl_stream<beast::tcp_stream> stream(busy_ioc, ctx);
    beast::get_lowest_layer(stream).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->port()));
    stream.handshake(asio::ssl::stream_base::client);
    return Exchange(stream, "POST", "/later", "y");
  });
  Responder done = parked.get_future().get();

  auto stopped = std::async(std::launch::async, [&] {
    const auto start = std::chrono::steady_clock::now();
    server->Stop(std::chrono::seconds(30));
    return std::chrono::steady_clock::now() - start;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let Stop() begin
  done(Response::Json(200, "{\"late\":true}"));
  Got late = busy.get();
  EXPECT_EQ(late.status, 200);
  EXPECT_EQ(late.body, "{\"late\":true}");
  EXPECT_LT(stopped.get(), std::chrono::seconds(15)) << "Stop() waited for the idle connection";
  char byte = 0;
  beast::error_code ec;
  beast::get_lowest_layer(idle).socket().read_some(asio::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec) << "the idle connection is still open";
}

TEST(ParseHostPortTest, ParsesAndNamesTheField) {
  auto a = ParseHostPort("metrics-address", "127.0.0.1:9090");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9090);
  EXPECT_EQ(ParseHostPort("x", ":8443")->host, "0.0.0.0");
  EXPECT_EQ(ParseHostPort("x", "[::1]:0")->host, "::1");
  for (const char* bad : {"9090", "host:", "host:99999", "host:abc", "host:80x"}) {
    SCOPED_TRACE(bad);
    auto st = ParseHostPort("listen-address", bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.message()).rfind("listen-address: \"", 0), 0u) << st.message();
  }
}

}  // namespace
}  // namespace wisp::http
