#include "wisp/populator/testing/test_http_server.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdlib>

#include "wisp/fsutil/read_file.hpp"

namespace wisp::populator::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct TestHttpServer::Impl {
  TestHttpServer* owner = nullptr;
  std::optional<TlsFiles> tls;
  asio::io_context ioc;
  std::optional<asio::ssl::context> ssl_ctx;
  std::optional<tcp::acceptor> acceptor;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  struct Entry {
    std::string file;
    ServeOptions options;
  };
  std::map<std::string, Entry> files;
  std::vector<std::string> ranges;
  std::vector<std::thread> conns;

  template <typename Stream>
  void Handle(Stream& stream) {
    beast::flat_buffer buffer;
    http::request<http::empty_body> req;
    beast::error_code ec;
    http::read(stream, buffer, req, ec);
    if (ec) return;
    owner->requests_++;
    std::string target(req.target());
    std::string range(req[http::field::range]);
    Entry entry;
    bool found = false;
    {
      std::lock_guard lock(mu);
      ranges.push_back(range);
      auto it = files.find(target.substr(0, target.find('?')));
      if (it != files.end()) {
        entry = it->second;
        found = true;
      }
    }
    struct stat st {};
    if (!found || ::stat(entry.file.c_str(), &st) != 0) {
      http::response<http::string_body> res{http::status::not_found, 11};
      res.body() = "not found\n";
      res.prepare_payload();
      res.keep_alive(false);
      http::write(stream, res, ec);
      return;
    }
    for (const auto& [name, value] : entry.options.required_headers) {
      if (req[name] != value) {
        http::response<http::string_body> res{http::status::forbidden, 11};
        res.body() = "missing header " + name + "\n";
        res.prepare_payload();
        res.keep_alive(false);
        http::write(stream, res, ec);
        return;
      }
    }
    uint64_t size = static_cast<uint64_t>(st.st_size);
    std::string etag = "\"" + std::to_string(size) + "-" + std::to_string(st.st_mtime) + "\"";
    uint64_t start = 0;
    bool partial = false;
    if (!range.empty() && !entry.options.ignore_range && range.rfind("bytes=", 0) == 0) {
      std::string if_range(req[http::field::if_range]);
      if (if_range.empty() || if_range == etag) {
        start = std::stoull(range.substr(6));
        partial = start < size;
        if (!partial) start = 0;
      }
    }
    http::response<http::empty_body> res{partial ? http::status::partial_content : http::status::ok,
                                         11};
    res.set(http::field::etag, etag);
    res.set(http::field::accept_ranges, "bytes");
    res.set(http::field::content_type, "application/octet-stream");
    if (partial) {
      res.set(http::field::content_range, "bytes " + std::to_string(start) + "-" +
                                              std::to_string(size - 1) + "/" +
                                              std::to_string(size));
    }
    res.content_length(size - start);
    res.keep_alive(false);
    http::response_serializer<http::empty_body> sr{res};
    http::write_header(stream, sr, ec);
    if (ec) return;
    int fd = ::open(entry.file.c_str(), O_RDONLY);
    if (fd < 0) return;
    std::vector<char> buf(256 * 1024);
    uint64_t sent = 0;
    uint64_t limit = size - start;
    if (entry.options.truncate_after) limit = std::min(limit, *entry.options.truncate_after);
    auto t0 = std::chrono::steady_clock::now();
    while (sent < limit && !stopping) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), limit - sent));
      if (entry.options.bytes_per_second > 0) want = std::min<size_t>(want, 64 * 1024);
      ssize_t got = ::pread(fd, buf.data(), want, static_cast<off_t>(start + sent));
      if (got <= 0) break;
      asio::write(stream, asio::buffer(buf.data(), static_cast<size_t>(got)), ec);
      if (ec) break;
      sent += static_cast<uint64_t>(got);
      if (entry.options.bytes_per_second > 0) {
        auto due =
            t0 + std::chrono::microseconds(sent * 1'000'000 / entry.options.bytes_per_second);
        std::this_thread::sleep_until(due);
      }
    }
    ::close(fd);
  }

  void Connection(tcp::socket socket) {
    beast::error_code ec;
    if (ssl_ctx) {
      asio::ssl::stream<tcp::socket> stream(std::move(socket), *ssl_ctx);
      stream.handshake(asio::ssl::stream_base::server, ec);
      if (ec) return;
      Handle(stream);
      stream.shutdown(ec);
    } else {
      Handle(socket);
      socket.shutdown(tcp::socket::shutdown_both, ec);
    }
  }
};

TestHttpServer::TestHttpServer() : impl_(std::make_unique<Impl>()) { impl_->owner = this; }
TestHttpServer::TestHttpServer(TlsFiles tls) : TestHttpServer() { impl_->tls = std::move(tls); }
TestHttpServer::~TestHttpServer() { Stop(); }

void TestHttpServer::Serve(const std::string& path, const std::string& file, ServeOptions options) {
  std::lock_guard lock(impl_->mu);
  impl_->files[path] = {file, options};
}

absl::Status TestHttpServer::Start() {
  try {
    if (impl_->tls) {
      impl_->ssl_ctx.emplace(asio::ssl::context::tls_server);
      impl_->ssl_ctx->use_certificate_chain_file(impl_->tls->cert_pem_path);
      impl_->ssl_ctx->use_private_key_file(impl_->tls->key_pem_path, asio::ssl::context::pem);
    }
    impl_->acceptor.emplace(impl_->ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port_ = impl_->acceptor->local_endpoint().port();
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("test server: ") + e.what());
  }
  impl_->accept_thread = std::thread([this] {
    while (!impl_->stopping) {
      beast::error_code ec;
      tcp::socket socket(impl_->ioc);
      impl_->acceptor->accept(socket, ec);
      if (ec || impl_->stopping) break;
      std::lock_guard lock(impl_->mu);
      impl_->conns.emplace_back(
          [this, s = std::move(socket)]() mutable { impl_->Connection(std::move(s)); });
    }
  });
  return absl::OkStatus();
}

void TestHttpServer::Stop() {
  if (!impl_->acceptor || impl_->stopping.exchange(true)) return;
  beast::error_code ec;
  // Wake the blocking accept with a connection of our own.
  {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  impl_->acceptor->close(ec);
  std::vector<std::thread> conns;
  {
    std::lock_guard lock(impl_->mu);
    conns.swap(impl_->conns);
  }
  for (auto& t : conns) t.join();
}

std::string TestHttpServer::Url(const std::string& path) const {
  return std::string(impl_->tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) +
         path;
}

std::vector<std::string> TestHttpServer::RangeRequests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->ranges;
}

int Sh(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string ReadFileOrDie(const std::string& path) {
  // Test images reach a few hundred MiB; "" when unreadable, so the comparison that follows fails.
  return fsutil::ReadFile(path, size_t{1} << 30).value_or("");
}

absl::StatusOr<TlsFiles> MakeSelfSignedCert(const std::string& dir) {
  TlsFiles f{dir + "/cert.pem", dir + "/key.pem"};
  std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + f.key_pem_path +
                    " -out " + f.cert_pem_path +
                    " -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost"
                    " >/dev/null 2>&1";
  if (Sh(cmd) != 0) return absl::InternalError("openssl req failed");
  return f;
}

}  // namespace wisp::populator::testing
