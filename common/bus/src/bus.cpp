#include "wisp/bus/bus.hpp"

#include <charconv>
#include <limits>

#include "absl/strings/cord.h"

namespace wisp::bus {

std::chrono::milliseconds Request::Remaining() const {
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    return std::chrono::milliseconds::max();
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

void Requester::RequestAsync(std::string_view subject, std::string_view data,
                             std::chrono::milliseconds timeout, const Headers& headers,
                             ReplyCallback done) {
  done(Request(subject, data, timeout, headers));
}

absl::Status StatusFromHeaders(const Headers& headers) {
  auto code_it = headers.find(kHeaderErrorCode);
  auto msg_it = headers.find(kHeaderError);
  if (code_it == headers.end() && msg_it == headers.end()) return absl::OkStatus();
  std::string message = msg_it == headers.end() ? std::string() : msg_it->second;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  if (code_it != headers.end()) code = ParseStatusCode(code_it->second);
  if (code == absl::StatusCode::kOk) {
    // "0" with a message is not a success anyone meant to send.
    if (message.empty()) return absl::OkStatus();
    code = absl::StatusCode::kUnknown;
  }
  if (message.empty()) message = std::string(StatusCodeName(code));
  return absl::Status(code, message);
}

namespace {
constexpr char kNoRespondersUrl[] = "type.wisp.dev/bus.NoResponders";
}  // namespace

absl::Status NoRespondersError(std::string message) {
  absl::Status status = absl::UnavailableError(std::move(message));
  status.SetPayload(kNoRespondersUrl, absl::Cord("1"));
  return status;
}

bool IsNoResponders(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kNoRespondersUrl).has_value();
}

void SetErrorHeaders(const absl::Status& status, Headers& headers) {
  if (status.ok()) return;
  headers[std::string(kHeaderErrorCode)] = std::to_string(static_cast<int>(status.code()));
  // Header values cannot carry CR/LF; keep the message on one line.
  std::string message(status.message());
  for (char& c : message) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  headers[std::string(kHeaderError)] = message;
}

absl::StatusOr<std::vector<Message>> Bus::RequestMany(std::string_view subject,
                                                      std::string_view data,
                                                      std::chrono::milliseconds timeout,
                                                      int /*max_replies*/, const Headers& headers) {
  auto reply = Request(subject, data, timeout, headers);
  if (!reply.ok()) {
    if (reply.status().code() == absl::StatusCode::kDeadlineExceeded ||
        reply.status().code() == absl::StatusCode::kUnavailable) {
      return std::vector<Message>{};
    }
    // A handler's error: hand it back as a reply carrying the headers, like the NATS path does.
    Message m;
    m.subject = std::string(subject);
    SetErrorHeaders(reply.status(), m.headers);
    return std::vector<Message>{std::move(m)};
  }
  return std::vector<Message>{*std::move(reply)};
}

Reply ServeRequest(const RequestHandler& handler, Message msg,
                   std::chrono::steady_clock::time_point received) {
  Request req;
  req.deadline = std::chrono::steady_clock::time_point::max();
  auto timeout_it = msg.headers.find(kHeaderTimeoutMs);
  if (timeout_it != msg.headers.end()) {
    const std::string& text = timeout_it->second;
    int64_t ms = -1;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (ec != std::errc() || p != text.data() + text.size() || ms < 0) {
      Reply reply = Reply::Error(absl::InvalidArgumentError(
          "header " + std::string(kHeaderTimeoutMs) + " is not a non-negative integer"));
      SetErrorHeaders(reply.status, reply.headers);
      return reply;
    }
    req.deadline = received + std::chrono::milliseconds(ms);
  }
  if (auto rid = msg.headers.find(kHeaderRequestId); rid != msg.headers.end()) {
    req.request_id = rid->second;
  }
  req.msg = std::move(msg);
  Reply reply;
  if (req.Expired()) {
    reply = Reply::Error(absl::DeadlineExceededError("deadline of request on " + req.msg.subject +
                                                     " passed before it was served"));
  } else {
    reply = handler(req);
  }
  SetErrorHeaders(reply.status, reply.headers);
  return reply;
}

bool SubjectMatches(std::string_view pattern, std::string_view subject) {
  while (true) {
    const size_t pdot = pattern.find('.');
    const size_t sdot = subject.find('.');
    const std::string_view ptok = pattern.substr(0, pdot);
    const std::string_view stok = subject.substr(0, sdot);
    if (ptok == ">") return !subject.empty();
    if (stok.empty()) return false;
    if (ptok != "*" && ptok != stok) return false;
    if (pdot == std::string_view::npos || sdot == std::string_view::npos) {
      return pdot == std::string_view::npos && sdot == std::string_view::npos;
    }
    pattern.remove_prefix(pdot + 1);
    subject.remove_prefix(sdot + 1);
  }
}

}  // namespace wisp::bus
