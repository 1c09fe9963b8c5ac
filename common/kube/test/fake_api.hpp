#pragma once
// Test helpers for kube unit tests: an http::Client that lets a test change FakeClient's answers
// between calls (a 429 then a 200, a list before and after a relist), and Status bodies.
#include <functional>
#include <mutex>
#include <string>

#include "wisp/http/testing/fake_client.hpp"

namespace wisp::kube::testing {

using http::testing::FakeClient;

// Calls `before(n, request)` (n = 0, 1, ...) before handing each request to the FakeClient.
class SequencedClient final : public http::Client {
 public:
  using Hook = std::function<void(int n, const http::ClientRequest& request, FakeClient& fake)>;
  explicit SequencedClient(Hook before = nullptr) : before_(std::move(before)) {}
  FakeClient& fake() { return fake_; }
  absl::StatusOr<http::ClientResponse> Send(const http::ClientRequest& r) override {
    Before(r);
    return fake_.Send(r);
  }
  absl::StatusOr<http::ResponseStreamPtr> Open(const http::ClientRequest& r) override {
    Before(r);
    return fake_.Open(r);
  }

 private:
  void Before(const http::ClientRequest& r) {
    std::lock_guard lock(mu_);
    if (before_) before_(n_, r, fake_);
    ++n_;
  }
  std::mutex mu_;
  Hook before_;
  int n_ = 0;
  FakeClient fake_;
};

inline http::ClientResponse StatusAnswer(int code, const std::string& reason,
                                         const std::string& message) {
  http::ClientResponse r = FakeClient::Ok(
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":")" +
          message + R"(","reason":")" + reason + R"(","code":)" + std::to_string(code) + "}",
      code);
  r.headers.emplace_back("content-type", "application/json");
  return r;
}

}  // namespace wisp::kube::testing
