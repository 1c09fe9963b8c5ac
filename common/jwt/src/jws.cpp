#include "wisp/jwt/jws.hpp"

#include <algorithm>
#include <optional>

#include "wisp/jwt/base64url.hpp"

namespace wisp::jwt {
namespace {

absl::Status Unauth(std::string message) { return absl::UnauthenticatedError(std::move(message)); }

absl::StatusOr<nlohmann::json> ParsePart(std::string_view b64, std::string_view what) {
  auto raw = Base64UrlDecode(b64);
  if (!raw.ok()) return Unauth("token " + std::string(what) + " is not base64url");
  nlohmann::json j = nlohmann::json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Unauth("token " + std::string(what) + " is not a JSON object");
  return j;
}

// A NumericDate claim: absent -> nullopt; present but not a number -> error.
absl::StatusOr<std::optional<int64_t>> TimeClaim(const nlohmann::json& claims, const char* name) {
  auto it = claims.find(name);
  if (it == claims.end()) return std::optional<int64_t>();
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  if (it->is_number_float()) return std::optional<int64_t>(static_cast<int64_t>(it->get<double>()));
  return Unauth(std::string("token claim ") + name + " is not a number");
}

}  // namespace

absl::StatusOr<std::string> Sign(const PrivateKey& key, std::string_view payload_json) {
  const std::string& header = key.EncodedJwsHeader();
  std::string input;
  // One allocation: header, payload and an ES256/RS256 signature in base64url.
  input.reserve(header.size() + 2 + (payload_json.size() + 2) / 3 * 4 + 344);
  input += header;
  input.push_back('.');
  input += Base64UrlEncode(payload_json);
  WISP_ASSIGN_OR_RETURN(std::string sig, key.Sign(input));
  input.push_back('.');
  input += Base64UrlEncode(sig);
  return input;
}

absl::StatusOr<Decoded> Decode(std::string_view token) {
  const size_t d1 = token.find('.');
  const size_t d2 = d1 == std::string_view::npos ? d1 : token.find('.', d1 + 1);
  if (d2 == std::string_view::npos || token.find('.', d2 + 1) != std::string_view::npos) {
    return Unauth("token is not a compact JWS (three dot-separated parts)");
  }
  Decoded out;
  WISP_ASSIGN_OR_RETURN(out.header, ParsePart(token.substr(0, d1), "header"));
  WISP_ASSIGN_OR_RETURN(out.claims, ParsePart(token.substr(d1 + 1, d2 - d1 - 1), "payload"));
  auto sig = Base64UrlDecode(token.substr(d2 + 1));
  if (!sig.ok()) return Unauth("token signature is not base64url");
  out.signature = std::move(*sig);
  out.signing_input = token.substr(0, d2);
  if (auto a = out.header.find("alg"); a != out.header.end() && a->is_string()) {
    out.alg = a->get<std::string>();
  }
  if (auto k = out.header.find("kid"); k != out.header.end() && k->is_string()) {
    out.kid = k->get<std::string>();
  }
  return out;
}

void KeySet::Add(PublicKey key) {
  std::string kid = key.kid();
  keys_.insert_or_assign(std::move(kid), std::move(key));
}

const PublicKey* KeySet::Find(std::string_view kid) const {
  auto it = keys_.find(kid);
  return it == keys_.end() ? nullptr : &it->second;
}

nlohmann::json KeySet::ToJwks() const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& [kid, key] : keys_) arr.push_back(key.Jwk());
  return nlohmann::json{{"keys", std::move(arr)}};
}

absl::StatusOr<KeySet> KeySet::FromJwks(std::string_view jwks_json) {
  nlohmann::json doc = nlohmann::json::parse(jwks_json, nullptr, false);
  if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array()) {
    return absl::InvalidArgumentError("jwks: not a JSON object with a \"keys\" array");
  }
  KeySet set;
  const auto& arr = doc["keys"];
  for (size_t i = 0; i < arr.size(); ++i) {
    const auto& jwk = arr[i];
    if (!jwk.is_object()) {
      return absl::InvalidArgumentError("jwks.keys[" + std::to_string(i) + "]: not an object");
    }
    const std::string kty = jwk.value("kty", "");
    if (kty != "RSA" && kty != "EC") continue;
    if (jwk.contains("use") && jwk["use"] != "sig") continue;
    if (jwk.contains("alg") && jwk["alg"] != "RS256" && jwk["alg"] != "ES256") continue;
    auto key = PublicKey::FromJwk(jwk);
    if (!key.ok()) {
      return absl::InvalidArgumentError("jwks.keys[" + std::to_string(i) +
                                        "]: " + std::string(key.status().message()));
    }
    set.Add(std::move(*key));
  }
  return set;
}

std::vector<std::string> Audiences(const nlohmann::json& claims) {
  std::vector<std::string> out;
  auto it = claims.find("aud");
  if (it == claims.end()) return out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& a : *it) {
      if (a.is_string()) out.push_back(a.get<std::string>());
    }
  }
  return out;
}

absl::StatusOr<Verified> Verify(std::string_view token, const KeySet& keys,
                                const VerifyOptions& options) {
  WISP_ASSIGN_OR_RETURN(Decoded d, Decode(token));
  if (d.alg.empty()) return Unauth("token header has no alg");
  if (d.alg == "none" || d.alg == "None" || d.alg == "NONE") {
    return Unauth("token alg \"none\" is refused");
  }
  auto alg = ParseAlgorithm(d.alg);
  if (!alg.ok()) return Unauth("token alg \"" + d.alg + "\" is refused (RS256 or ES256 only)");
  if (d.header.contains("crit")) return Unauth("token header has unsupported \"crit\"");

  const PublicKey* key = nullptr;
  if (!d.kid.empty()) {
    key = keys.Find(d.kid);
    if (key == nullptr) return Unauth("token kid \"" + d.kid + "\" is not a known key");
  } else {
    // No kid: acceptable only when exactly one key of that algorithm could have signed it.
    for (const auto& [kid, k] : keys.keys()) {
      if (k.algorithm() != *alg) continue;
      if (key != nullptr) return Unauth("token has no kid and several keys could match");
      key = &k;
    }
    if (key == nullptr) return Unauth("token has no kid and no key matches its alg");
  }
  if (key->algorithm() != *alg) {
    return Unauth("token alg " + d.alg + " does not match key " + key->kid() + " (" +
                  std::string(AlgorithmName(key->algorithm())) + ")");
  }
  if (!key->Verify(d.signing_input, d.signature)) return Unauth("token signature is invalid");

  const auto& c = d.claims;
  const int64_t leeway = options.leeway.count();
  WISP_ASSIGN_OR_RETURN(auto exp, TimeClaim(c, "exp"));
  WISP_ASSIGN_OR_RETURN(auto nbf, TimeClaim(c, "nbf"));
  WISP_ASSIGN_OR_RETURN(auto iat, TimeClaim(c, "iat"));
  (void)iat;
  if (!exp && options.require_exp) return Unauth("token has no exp");
  if (exp && options.now_unix >= *exp + leeway) return Unauth("token has expired");
  if (nbf && options.now_unix + leeway < *nbf) return Unauth("token is not valid yet (nbf)");
  if (!options.issuer.empty()) {
    auto iss = c.find("iss");
    if (iss == c.end() || !iss->is_string() || *iss != options.issuer) {
      return Unauth("token issuer does not match \"" + options.issuer + "\"");
    }
  }
  if (!options.audiences.empty()) {
    const auto auds = Audiences(c);
    const bool any = std::any_of(auds.begin(), auds.end(), [&](const std::string& a) {
      return std::find(options.audiences.begin(), options.audiences.end(), a) !=
             options.audiences.end();
    });
    if (!any) return Unauth("token audience is not one of the accepted audiences");
  }
  Verified out;
  out.claims = std::move(d.claims);
  out.kid = key->kid();
  out.alg = *alg;
  return out;
}

}  // namespace wisp::jwt
