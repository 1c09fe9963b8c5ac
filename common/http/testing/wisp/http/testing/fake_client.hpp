#pragma once
// FakeClient: an http::Client for unit tests of code that calls out over HTTP (no sockets).
//
// Contract:
//   - Answers are registered per method and URL (exact, query included) with On(); each answer is
//     a response (any status, a body) or a transport error (a Status, as the real client maps
//     them, see wisp/http/client.hpp). The latest registration for a key wins and answers every
//     call. A request nobody registered is Unimplemented, naming method and URL.
//   - Open() yields the body in the registered chunks (one Read per chunk, ReadLine over them),
//     then `end`: OK for a clean end, or the error a cut-short body gives.
//   - Every request is recorded (requests()); a body_reader is drained into `body` first, so
//     tests see what would have been uploaded. Send() applies max_response_bytes like the real
//     client, and a response's empty `url` and `method` are filled in as the real client does
//     (the request's, url redacted), so StatusOf() names them. Thread-safe.
//
// Example:
//   http::testing::FakeClient fake;
//   fake.On("GET", "https://idp/keys", http::testing::FakeClient::Ok(R"({"keys":[]})"));
//   Thing thing(fake);                    // takes http::Client&
//   EXPECT_EQ(fake.requests().size(), 1u);
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "wisp/http/client.hpp"
#include "wisp/http/url.hpp"

namespace wisp::http::testing {

class FakeClient final : public Client {
 public:
  struct Answer {
    absl::StatusOr<ClientResponse> response;
    std::vector<std::string> chunks;  // Open(): the body as it arrives (default: response.body)
    absl::Status end = absl::OkStatus();
  };

  static ClientResponse Ok(std::string body, int status = 200) {
    ClientResponse r;
    r.status = status;
    r.reason = status == 200 ? "OK" : "";
    r.body = std::move(body);
    r.content_length = r.body.size();
    return r;
  }

  void On(const std::string& method, const std::string& url, Answer answer) {
    std::lock_guard lock(mu_);
    answers_[method + " " + url] = std::move(answer);
  }
  void On(const std::string& method, const std::string& url, absl::StatusOr<ClientResponse> r) {
    On(method, url, Answer{std::move(r), {}, absl::OkStatus()});
  }

  std::vector<ClientRequest> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

  absl::StatusOr<ClientResponse> Send(const ClientRequest& request) override {
    WISP_ASSIGN_OR_RETURN(Answer a, Find(request));
    WISP_RETURN_IF_ERROR(a.response.status());
    ClientResponse r = Addressed(*a.response, request);
    if (!a.chunks.empty()) {
      r.body.clear();
      for (const auto& c : a.chunks) r.body += c;
    }
    WISP_RETURN_IF_ERROR(a.end);
    const uint64_t limit = request.max_response_bytes.value_or(64ull << 20);
    if (r.body.size() > limit) {
      return absl::ResourceExhaustedError(request.method + " " + request.url +
                                          ": response is larger than " + std::to_string(limit) +
                                          " bytes");
    }
    return r;
  }

  absl::StatusOr<ResponseStreamPtr> Open(const ClientRequest& request) override {
    WISP_ASSIGN_OR_RETURN(Answer a, Find(request));
    WISP_RETURN_IF_ERROR(a.response.status());
    ClientResponse head = Addressed(*a.response, request);
    std::vector<std::string> chunks = a.chunks;
    if (chunks.empty() && !head.body.empty()) chunks.push_back(head.body);
    head.body.clear();
    return ResponseStreamPtr(new Stream(std::move(head), std::move(chunks), a.end));
  }

 private:
  static ClientResponse Addressed(ClientResponse r, const ClientRequest& request) {
    if (r.method.empty()) r.method = request.method.empty() ? "GET" : request.method;
    if (r.url.empty()) {
      auto url = ParseUrl(request.url);
      r.url = url.ok() ? url->Redacted() : request.url;
    }
    return r;
  }

  class Stream final : public ResponseStream {
   public:
    Stream(ClientResponse r, std::vector<std::string> chunks, absl::Status end)
        : response_(std::move(r)), chunks_(std::move(chunks)), end_(std::move(end)) {}
    const ClientResponse& response() const override { return response_; }
    uint64_t bytes_read() const override { return read_; }
    absl::StatusOr<size_t> Read(char* buf, size_t n) override {
      if (!pending_.empty()) {  // left over by ReadLine, already counted
        size_t k = std::min(n, pending_.size());
        std::copy_n(pending_.data(), k, buf);
        pending_.erase(0, k);
        return k;
      }
      return ReadChunk(buf, n);
    }
    absl::StatusOr<size_t> ReadChunk(char* buf, size_t n) {
      while (next_ < chunks_.size() && chunks_[next_].empty()) ++next_;
      if (next_ == chunks_.size()) {
        if (!end_.ok()) return end_;
        return 0;
      }
      std::string& c = chunks_[next_];
      size_t k = Take(c, buf, n);
      if (c.empty()) ++next_;
      return k;
    }
    absl::StatusOr<std::optional<std::string>> ReadLine(size_t max_line) override {
      while (true) {
        size_t nl = pending_.find('\n');
        if (nl != std::string::npos) {
          std::string line = pending_.substr(0, nl);
          pending_.erase(0, nl + 1);
          if (!line.empty() && line.back() == '\r') line.pop_back();
          return std::optional<std::string>(std::move(line));
        }
        if (pending_.size() > max_line) {
          return absl::ResourceExhaustedError("a line is longer than " + std::to_string(max_line) +
                                              " bytes");
        }
        char buf[4096];
        WISP_ASSIGN_OR_RETURN(size_t got, ReadChunk(buf, sizeof buf));
        if (got == 0) {
          if (pending_.empty()) return std::optional<std::string>();
          std::string last = std::move(pending_);
          pending_.clear();
          return std::optional<std::string>(std::move(last));
        }
        pending_.append(buf, got);
      }
    }

   private:
    size_t Take(std::string& from, char* buf, size_t n) {
      size_t k = std::min(n, from.size());
      std::copy_n(from.data(), k, buf);
      from.erase(0, k);
      read_ += k;
      return k;
    }
    ClientResponse response_;
    std::vector<std::string> chunks_;
    absl::Status end_;
    size_t next_ = 0;
    uint64_t read_ = 0;
    std::string pending_;
  };

  absl::StatusOr<Answer> Find(const ClientRequest& request) {
    ClientRequest copy = request;
    if (copy.body_reader) {
      char buf[64 * 1024];
      while (true) {
        WISP_ASSIGN_OR_RETURN(size_t got, copy.body_reader(buf, sizeof buf));
        if (got == 0) break;
        copy.body.append(buf, got);
      }
      copy.body_reader = nullptr;
    }
    std::lock_guard lock(mu_);
    requests_.push_back(copy);
    const std::string method = request.method.empty() ? "GET" : request.method;
    auto it = answers_.find(method + " " + request.url);
    if (it == answers_.end()) {
      return absl::UnimplementedError("FakeClient: no answer for " + method + " " + request.url);
    }
    return it->second;
  }

  mutable std::mutex mu_;
  std::map<std::string, Answer> answers_;
  std::vector<ClientRequest> requests_;
};

}  // namespace wisp::http::testing
