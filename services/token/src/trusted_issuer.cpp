#include "trusted_issuer.hpp"

#include "remote_jwks.hpp"

namespace wisp::token {

const TrustedIssuer* FindTrustedIssuer(const Policy& policy, std::string_view iss) {
  for (const auto& t : policy.trusted_issuers) {
    if (t.issuer == iss) return &t;
  }
  return nullptr;
}

absl::StatusOr<jwt::Verified> VerifyTrusted(const TrustedIssuer& t, std::string_view token,
                                            const jwt::Decoded& decoded,
                                            const std::vector<std::string>& audiences,
                                            int64_t now_unix, std::chrono::seconds leeway) {
  jwt::VerifyOptions opts;
  opts.issuer = t.issuer;
  opts.audiences = audiences;
  opts.now_unix = now_unix;
  opts.leeway = leeway;
  if (!t.remote) return jwt::Verify(token, t.keys, opts);
  auto keys = t.remote->Current();
  if (!t.remote->loaded()) {
    // Never fetched successfully yet (the IdP was down at start): try now, rate-limited.
    if (t.remote->RefreshForUnknownKid()) keys = t.remote->Current();
  } else if (!decoded.kid.empty() && keys->Find(decoded.kid) == nullptr) {
    // The issuer may have rotated since the last fetch.
    if (t.remote->RefreshForUnknownKid()) keys = t.remote->Current();
  }
  if (!t.remote->loaded()) {
    return absl::UnavailableError("the JWKS of issuer " + t.issuer + " could not be fetched");
  }
  return jwt::Verify(token, *keys, opts);
}

}  // namespace wisp::token
