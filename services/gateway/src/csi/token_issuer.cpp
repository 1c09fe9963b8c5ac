#include "csi/token_issuer.hpp"

#include <algorithm>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::gateway::csi {

namespace {

v1::IssueRequest RequestFor(const v1::Subject& subject, const std::string& audience,
                            int64_t expiration_seconds, const std::string& pod_proof) {
  v1::IssueRequest req;
  *req.mutable_subject() = subject;
  if (!audience.empty()) req.add_audiences(audience);
  req.set_expiration_seconds(expiration_seconds);
  if (!pod_proof.empty()) req.set_pod_proof(pod_proof);
  return req;
}

}  // namespace

std::vector<absl::StatusOr<IssuedToken>> TokenIssuer::IssueBatch(
    const std::vector<IssueSpec>& specs) {
  std::vector<absl::StatusOr<IssuedToken>> out;
  out.reserve(specs.size());
  for (const IssueSpec& s : specs) {
    out.push_back(Issue(s.subject, s.audience, s.expiration_seconds, s.pod_proof));
  }
  return out;
}

absl::StatusOr<IssuedToken> BusTokenIssuer::Issue(const v1::Subject& subject,
                                                  const std::string& audience,
                                                  int64_t expiration_seconds,
                                                  const std::string& pod_proof) {
  const v1::IssueRequest req = RequestFor(subject, audience, expiration_seconds, pod_proof);
  auto resp = bus::Call<v1::IssueResponse>(requester_, bus::subjects::kTokenIssue, req, timeout_);
  if (!resp.ok()) return Annotate(resp.status(), "issuing token");
  if (resp->token().empty()) return absl::InternalError("issuing token: empty token in reply");
  return IssuedToken{resp->token(), resp->issued_at_unix(), resp->expiration_unix()};
}

std::vector<absl::StatusOr<IssuedToken>> BusTokenIssuer::IssueBatch(
    const std::vector<IssueSpec>& specs) {
  std::vector<absl::StatusOr<IssuedToken>> out;
  out.reserve(specs.size());
  for (size_t first = 0; first < specs.size(); first += kMaxBatch) {
    const size_t n = std::min(kMaxBatch, specs.size() - first);
    v1::IssueBatchRequest req;
    for (size_t i = first; i < first + n; ++i) {
      const IssueSpec& s = specs[i];
      *req.add_requests() = RequestFor(s.subject, s.audience, s.expiration_seconds, s.pod_proof);
    }
    auto resp = bus::Call<v1::IssueBatchResponse>(requester_, bus::subjects::kTokenIssueBatch, req,
                                                  timeout_);
    absl::Status whole = resp.ok() ? absl::OkStatus() : Annotate(resp.status(), "issuing tokens");
    if (whole.ok() && resp->results_size() != static_cast<int>(n)) {
      whole = absl::InternalError("issuing tokens: " + std::to_string(resp->results_size()) +
                                  " results for " + std::to_string(n) + " requests");
    }
    for (size_t i = 0; i < n; ++i) {
      if (!whole.ok()) {
        out.push_back(whole);
        continue;
      }
      const v1::IssueResult& r = resp->results(static_cast<int>(i));
      if (r.code() != 0) {
        // A code this build does not know (a newer wisp-token) reads as Unknown.
        const auto code = r.code() > 0 && r.code() <= 16 ? static_cast<absl::StatusCode>(r.code())
                                                         : absl::StatusCode::kUnknown;
        out.push_back(absl::Status(code, "issuing token: " + r.message()));
      } else if (r.token().token().empty()) {
        out.push_back(absl::InternalError("issuing token: empty token in reply"));
      } else {
        out.push_back(IssuedToken{r.token().token(), r.token().issued_at_unix(),
                                  r.token().expiration_unix()});
      }
    }
  }
  return out;
}

}  // namespace wisp::gateway::csi
