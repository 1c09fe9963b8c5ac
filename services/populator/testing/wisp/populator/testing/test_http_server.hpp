#pragma once
// TestHttpServer: an HTTP/HTTPS file server for populator tests (unit, integration, bench). Binds
// 127.0.0.1:0, serves registered paths from files with strong ETags and Range support, and can
// misbehave on purpose: cut the body short, throttle, or ignore Range; and refuse requests that
// lack a header.
//
//   TestHttpServer server;                      // or TestHttpServer(TlsFiles{cert, key})
//   server.Serve("/disk.qcow2", "/tmp/x/disk.qcow2");
//   ASSERT_TRUE(server.Start().ok());
//   std::string url = server.Url("/disk.qcow2");
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::populator::testing {

struct TlsFiles {
  std::string cert_pem_path;
  std::string key_pem_path;
};

struct ServeOptions {
  std::optional<uint64_t> truncate_after;  // close the connection after this many body bytes
  uint64_t bytes_per_second = 0;           // 0 = unthrottled
  bool ignore_range = false;
  // Headers every request must carry with these values (a mirror's tenant or API-key header):
  // a request without them is answered 403 Forbidden, a Range request included.
  std::map<std::string, std::string> required_headers;
};

class TestHttpServer {
 public:
  TestHttpServer();
  explicit TestHttpServer(TlsFiles tls);
  ~TestHttpServer();

  void Serve(const std::string& path, const std::string& file, ServeOptions options = {});
  absl::Status Start();
  void Stop();
  std::string Url(const std::string& path) const;
  uint16_t port() const { return port_; }
  // Range headers seen so far ("" for a request without one), in order.
  std::vector<std::string> RangeRequests() const;
  int requests() const { return requests_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::atomic<int> requests_{0};
  friend struct Impl;
};

// Writes a self-signed certificate for 127.0.0.1 and localhost (openssl CLI) into `dir`; the cert
// doubles as the CA bundle clients must trust.
absl::StatusOr<TlsFiles> MakeSelfSignedCert(const std::string& dir);

// Runs a shell command; returns its exit status (for building test images with qemu-img etc.).
int Sh(const std::string& command);
std::string ReadFileOrDie(const std::string& path);

}  // namespace wisp::populator::testing
