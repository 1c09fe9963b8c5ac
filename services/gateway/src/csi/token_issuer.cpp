#include "csi/token_issuer.hpp"

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::gateway::csi {

absl::StatusOr<IssuedToken> BusTokenIssuer::Issue(const v1::Subject& subject,
                                                  const std::string& audience,
                                                  int64_t expiration_seconds,
                                                  const std::string& pod_proof) {
  v1::IssueRequest req;
  *req.mutable_subject() = subject;
  if (!audience.empty()) req.add_audiences(audience);
  req.set_expiration_seconds(expiration_seconds);
  if (!pod_proof.empty()) req.set_pod_proof(pod_proof);
  auto resp = bus::Call<v1::IssueResponse>(requester_, bus::subjects::kTokenIssue, req, timeout_);
  if (!resp.ok()) return Annotate(resp.status(), "issuing token");
  if (resp->token().empty()) return absl::InternalError("issuing token: empty token in reply");
  return IssuedToken{resp->token(), resp->issued_at_unix(), resp->expiration_unix()};
}

}  // namespace wisp::gateway::csi
