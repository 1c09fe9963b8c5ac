#pragma once
// Protobuf bodies over the bus.
//
//   WISP_ASSIGN_OR_RETURN(auto resp, bus::Call<v1::IssueResponse>(requester, subjects::kTokenIssue,
//                                                                 req, 2s));
//   // serving side:
//   auto req = bus::ParseBody<v1::IssueRequest>(request);   // InvalidArgument when it does not
//   parse if (!req.ok()) return bus::Reply::Error(req.status()); return bus::ProtoReply(response);
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <google/protobuf/message_lite.h>

#include "wisp/bus/bus.hpp"

namespace wisp::bus {

template <typename Resp>
absl::StatusOr<Resp> Call(Requester& requester, std::string_view subject,
                          const google::protobuf::MessageLite& request,
                          std::chrono::milliseconds timeout, const Headers& headers = {}) {
  std::string body;
  if (!request.SerializeToString(&body)) {
    return absl::InternalError("serializing " + request.GetTypeName());
  }
  auto reply = requester.Request(subject, body, timeout, headers);
  if (!reply.ok()) return reply.status();
  Resp resp;
  if (!resp.ParseFromString(reply->data)) {
    return absl::DataLossError("reply on " + std::string(subject) + " is not a valid " +
                               resp.GetTypeName());
  }
  return resp;
}

// Call() without holding a thread: `done` gets the parsed reply or the error, on the threads that
// Requester::RequestAsync names.
template <typename Resp>
void CallAsync(Requester& requester, std::string_view subject,
               const google::protobuf::MessageLite& request, std::chrono::milliseconds timeout,
               const Headers& headers, std::function<void(absl::StatusOr<Resp>)> done) {
  std::string body;
  if (!request.SerializeToString(&body)) {
    return done(absl::InternalError("serializing " + request.GetTypeName()));
  }
  requester.RequestAsync(
      subject, body, timeout, headers,
      [subject = std::string(subject), done = std::move(done)](absl::StatusOr<Message> reply) {
        if (!reply.ok()) return done(reply.status());
        Resp resp;
        if (!resp.ParseFromString(reply->data)) {
          return done(
              absl::DataLossError("reply on " + subject + " is not a valid " + resp.GetTypeName()));
        }
        done(std::move(resp));
      });
}

template <typename Req>
absl::StatusOr<Req> ParseBody(const Request& request) {
  Req req;
  if (!req.ParseFromString(request.msg.data)) {
    return absl::InvalidArgumentError("body on " + request.msg.subject + " is not a valid " +
                                      req.GetTypeName());
  }
  return req;
}

inline Reply ProtoReply(const google::protobuf::MessageLite& message) {
  Reply reply;
  if (!message.SerializeToString(&reply.data)) {
    reply.status = absl::InternalError("serializing " + message.GetTypeName());
  }
  return reply;
}

}  // namespace wisp::bus
