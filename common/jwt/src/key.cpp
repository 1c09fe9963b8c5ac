#include "wisp/jwt/key.hpp"

#include <memory>
#include <mutex>
#include <vector>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>

#include "openssl_util.hpp"
#include "wisp/jwt/base64url.hpp"

namespace wisp::jwt {
namespace {

using internal::BnPtr;
using internal::OpenSslError;
using internal::PkeyCtxPtr;
using internal::PkeyPtr;

constexpr int kMinRsaBits = 2048;
constexpr size_t kP256Half = 32;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

// OpenSSL 3's one-shot SHA256() fetches the implementation from the provider store on every
// call (a read lock, name comparisons, reference counts: about as long as hashing a token's
// signing input). The digest is fetched once and each thread reuses one context.
std::string Sha256(std::string_view data) {
  static EVP_MD* const kSha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  struct CtxFree {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  thread_local std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  unsigned char md[SHA256_DIGEST_LENGTH];
  unsigned int len = 0;
  if (kSha256 == nullptr || !ctx || EVP_DigestInit_ex2(ctx.get(), kSha256, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) {
    // Not expected once the provider loaded; the one-shot path is always there.
    SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  }
  return std::string(reinterpret_cast<char*>(md), sizeof(md));
}

absl::StatusOr<std::string> BnParam(const EVP_PKEY* pkey, const char* name, int pad) {
  BIGNUM* raw = nullptr;
  if (EVP_PKEY_get_bn_param(pkey, name, &raw) != 1) return OpenSslError(name);
  BnPtr bn(raw);
  const int len = pad > 0 ? pad : BN_num_bytes(bn.get());
  std::string out(static_cast<size_t>(len), '\0');
  const int n = pad > 0 ? BN_bn2binpad(bn.get(), reinterpret_cast<unsigned char*>(out.data()), len)
                        : BN_bn2bin(bn.get(), reinterpret_cast<unsigned char*>(out.data()));
  if (n < 0) return OpenSslError(name);
  out.resize(static_cast<size_t>(n));
  return out;
}

// Classifies an OpenSSL key: RSA >= 2048 bits -> RS256, P-256 -> ES256.
absl::StatusOr<Algorithm> AlgorithmOf(const EVP_PKEY* pkey) {
  if (EVP_PKEY_is_a(pkey, "RSA")) {
    if (EVP_PKEY_get_bits(pkey) < kMinRsaBits) {
      return absl::InvalidArgumentError("RSA key is smaller than 2048 bits");
    }
    return Algorithm::kRS256;
  }
  if (EVP_PKEY_is_a(pkey, "EC")) {
    char group[64];
    size_t len = 0;
    if (EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
                                       &len) != 1) {
      return absl::InvalidArgumentError("EC key without a named curve");
    }
    const std::string_view g(group, len);
    if (g != "prime256v1" && g != "P-256") {
      return absl::InvalidArgumentError("EC key on curve " + std::string(g) + ", want P-256");
    }
    return Algorithm::kES256;
  }
  return absl::InvalidArgumentError("key is neither RSA nor EC");
}

absl::StatusOr<std::string> JwkMember(const nlohmann::json& jwk, const char* name) {
  auto it = jwk.find(name);
  if (it == jwk.end() || !it->is_string()) {
    return absl::InvalidArgumentError(std::string("jwk.") + name + ": missing or not a string");
  }
  auto decoded = Base64UrlDecode(it->get<std::string>());
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(std::string("jwk.") + name + ": " +
                                      std::string(decoded.status().message()));
  }
  if (decoded->empty()) return absl::InvalidArgumentError(std::string("jwk.") + name + ": empty");
  return decoded;
}

absl::StatusOr<PkeyPtr> FromData(const char* type, OSSL_PARAM_BLD* bld, const char* what) {
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
  if (params == nullptr) return OpenSslError("building key parameters");
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  EVP_PKEY* raw = nullptr;
  const bool ok = ctx && EVP_PKEY_fromdata_init(ctx.get()) == 1 &&
                  EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params) == 1;
  OSSL_PARAM_free(params);
  if (!ok) {
    internal::LastError();
    return absl::InvalidArgumentError(what);
  }
  return PkeyPtr(raw);
}

}  // namespace

std::string_view AlgorithmName(Algorithm alg) {
  return alg == Algorithm::kES256 ? "ES256" : "RS256";
}

absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  if (name == "RS256") return Algorithm::kRS256;
  if (name == "ES256") return Algorithm::kES256;
  return absl::InvalidArgumentError("algorithm \"" + std::string(name) +
                                    "\" is not accepted (RS256 or ES256)");
}

absl::StatusOr<std::string> EcdsaDerToRaw(std::string_view der, size_t half_len) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size()));
  if (sig == nullptr) {
    internal::LastError();
    return absl::InvalidArgumentError("ECDSA signature is not valid DER");
  }
  const BIGNUM* r = nullptr;
  const BIGNUM* s = nullptr;
  ECDSA_SIG_get0(sig, &r, &s);
  std::string out(2 * half_len, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  const bool ok = BN_bn2binpad(r, o, static_cast<int>(half_len)) >= 0 &&
                  BN_bn2binpad(s, o + half_len, static_cast<int>(half_len)) >= 0;
  ECDSA_SIG_free(sig);
  if (!ok) return absl::InvalidArgumentError("ECDSA signature value too large");
  return out;
}

absl::StatusOr<std::string> EcdsaRawToDer(std::string_view raw) {
  if (raw.empty() || raw.size() % 2 != 0) {
    return absl::InvalidArgumentError("ECDSA raw signature has an odd or zero length");
  }
  const size_t half = raw.size() / 2;
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  BIGNUM* r = BN_bin2bn(p, static_cast<int>(half), nullptr);
  BIGNUM* s = BN_bin2bn(p + half, static_cast<int>(half), nullptr);
  ECDSA_SIG* sig = ECDSA_SIG_new();
  if (r == nullptr || s == nullptr || sig == nullptr || ECDSA_SIG_set0(sig, r, s) != 1) {
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return OpenSslError("ECDSA_SIG");
  }
  unsigned char* der = nullptr;
  const int len = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  if (len <= 0) return OpenSslError("i2d_ECDSA_SIG");
  std::string out(reinterpret_cast<char*>(der), static_cast<size_t>(len));
  OPENSSL_free(der);
  return out;
}

// ---- PublicKey -----------------------------------------------------------------------------

struct PublicKey::Impl {
  PkeyPtr pkey;
  std::string thumbprint;
  nlohmann::json members;  // the required JWK members (RFC 7638 order is lexical: json sorts)
};

namespace {

// Builds the Impl of a public key: the required JWK members and the thumbprint.
absl::StatusOr<std::shared_ptr<PublicKey::Impl>> MakePublicImpl(PkeyPtr pkey, Algorithm alg);

}  // namespace

absl::StatusOr<PublicKey> PublicKey::FromJwk(const nlohmann::json& jwk) {
  if (!jwk.is_object()) return absl::InvalidArgumentError("jwk: not a JSON object");
  auto kty = jwk.find("kty");
  if (kty == jwk.end() || !kty->is_string()) {
    return absl::InvalidArgumentError("jwk.kty: missing or not a string");
  }
  PkeyPtr pkey;
  Algorithm alg;
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(),
                                                                      &OSSL_PARAM_BLD_free);
  if (*kty == "RSA") {
    WISP_ASSIGN_OR_RETURN(std::string n, JwkMember(jwk, "n"));
    WISP_ASSIGN_OR_RETURN(std::string e, JwkMember(jwk, "e"));
    BnPtr bn_n(BN_bin2bn(reinterpret_cast<const unsigned char*>(n.data()),
                         static_cast<int>(n.size()), nullptr));
    BnPtr bn_e(BN_bin2bn(reinterpret_cast<const unsigned char*>(e.data()),
                         static_cast<int>(e.size()), nullptr));
    if (!bn_n || !bn_e ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) != 1) {
      return OpenSslError("RSA parameters");
    }
    WISP_ASSIGN_OR_RETURN(pkey,
                          FromData("RSA", bld.get(), "jwk.n/jwk.e: not a valid RSA public key"));
    alg = Algorithm::kRS256;
  } else if (*kty == "EC") {
    auto crv = jwk.find("crv");
    if (crv == jwk.end() || *crv != "P-256") {
      return absl::InvalidArgumentError("jwk.crv: only P-256 is accepted");
    }
    WISP_ASSIGN_OR_RETURN(std::string x, JwkMember(jwk, "x"));
    WISP_ASSIGN_OR_RETURN(std::string y, JwkMember(jwk, "y"));
    if (x.size() != kP256Half || y.size() != kP256Half) {
      return absl::InvalidArgumentError("jwk.x/jwk.y: P-256 coordinates must be 32 bytes");
    }
    std::string point = "\x04" + x + y;
    if (OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) !=
            1 ||
        OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                         point.size()) != 1) {
      return OpenSslError("EC parameters");
    }
    WISP_ASSIGN_OR_RETURN(pkey, FromData("EC", bld.get(), "jwk.x/jwk.y: point is not on P-256"));
    PkeyCtxPtr check(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey.get(), nullptr));
    if (!check || EVP_PKEY_public_check(check.get()) != 1) {
      internal::LastError();
      return absl::InvalidArgumentError("jwk.x/jwk.y: point is not on P-256");
    }
    alg = Algorithm::kES256;
  } else {
    return absl::InvalidArgumentError("jwk.kty: \"" + kty->dump() + "\" is not RSA or EC");
  }
  WISP_ASSIGN_OR_RETURN(Algorithm checked, AlgorithmOf(pkey.get()));
  (void)checked;
  if (auto a = jwk.find("alg"); a != jwk.end()) {
    if (!a->is_string() || *a != AlgorithmName(alg)) {
      return absl::InvalidArgumentError("jwk.alg: " + a->dump() + " does not match key type " +
                                        kty->get<std::string>());
    }
  }
  if (auto use = jwk.find("use"); use != jwk.end() && *use != "sig") {
    return absl::InvalidArgumentError("jwk.use: " + use->dump() + " is not \"sig\"");
  }
  PublicKey out;
  WISP_ASSIGN_OR_RETURN(auto impl, MakePublicImpl(std::move(pkey), alg));
  out.impl_ = std::move(impl);
  out.alg_ = alg;
  out.kid_ = out.impl_->thumbprint;
  if (auto kid = jwk.find("kid"); kid != jwk.end()) {
    if (!kid->is_string() || kid->get<std::string>().empty()) {
      return absl::InvalidArgumentError("jwk.kid: not a non-empty string");
    }
    out.kid_ = kid->get<std::string>();
  }
  return out;
}

absl::StatusOr<PublicKey> PublicKey::FromPem(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EVP_PKEY* raw = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (raw == nullptr) {
    internal::LastError();
    return absl::InvalidArgumentError("not a PEM public key");
  }
  PkeyPtr pkey(raw);
  WISP_ASSIGN_OR_RETURN(Algorithm alg, AlgorithmOf(pkey.get()));
  PublicKey out;
  WISP_ASSIGN_OR_RETURN(auto impl, MakePublicImpl(std::move(pkey), alg));
  out.impl_ = std::move(impl);
  out.alg_ = alg;
  out.kid_ = out.impl_->thumbprint;
  return out;
}

std::string PublicKey::Thumbprint() const { return impl_ ? impl_->thumbprint : std::string(); }

nlohmann::json PublicKey::Jwk() const {
  nlohmann::json jwk = impl_ ? impl_->members : nlohmann::json::object();
  jwk["alg"] = AlgorithmName(alg_);
  jwk["use"] = "sig";
  jwk["kid"] = kid_;
  return jwk;
}

absl::StatusOr<std::string> PublicKey::ToPem() const {
  if (!impl_) return absl::FailedPreconditionError("empty public key");
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), impl_->pkey.get()) != 1) {
    return OpenSslError("writing public key");
  }
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

bool PublicKey::Verify(std::string_view signing_input, std::string_view signature) const {
  if (!impl_) return false;
  const std::string digest = Sha256(signing_input);
  std::string sig;
  if (alg_ == Algorithm::kES256) {
    if (signature.size() != 2 * kP256Half) return false;
    auto der = EcdsaRawToDer(signature);
    if (!der.ok()) return false;
    sig = std::move(*der);
  } else {
    sig = std::string(signature);
  }
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, impl_->pkey.get(), nullptr));
  bool ok = ctx && EVP_PKEY_verify_init(ctx.get()) == 1;
  if (ok && alg_ == Algorithm::kRS256) {
    ok = EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PADDING) == 1;
  }
  ok = ok && EVP_PKEY_CTX_set_signature_md(ctx.get(), EVP_sha256()) == 1 &&
       EVP_PKEY_verify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(digest.data()), digest.size()) == 1;
  if (!ok) ERR_clear_error();
  return ok;
}

namespace {

absl::StatusOr<std::shared_ptr<PublicKey::Impl>> MakePublicImpl(PkeyPtr pkey, Algorithm alg) {
  auto impl = std::make_shared<PublicKey::Impl>();
  nlohmann::json m = nlohmann::json::object();
  if (alg == Algorithm::kRS256) {
    WISP_ASSIGN_OR_RETURN(std::string n, BnParam(pkey.get(), OSSL_PKEY_PARAM_RSA_N, 0));
    WISP_ASSIGN_OR_RETURN(std::string e, BnParam(pkey.get(), OSSL_PKEY_PARAM_RSA_E, 0));
    m["kty"] = "RSA";
    m["n"] = Base64UrlEncode(n);
    m["e"] = Base64UrlEncode(e);
  } else {
    WISP_ASSIGN_OR_RETURN(std::string x, BnParam(pkey.get(), OSSL_PKEY_PARAM_EC_PUB_X, kP256Half));
    WISP_ASSIGN_OR_RETURN(std::string y, BnParam(pkey.get(), OSSL_PKEY_PARAM_EC_PUB_Y, kP256Half));
    m["kty"] = "EC";
    m["crv"] = "P-256";
    m["x"] = Base64UrlEncode(x);
    m["y"] = Base64UrlEncode(y);
  }
  // nlohmann::json objects keep keys sorted and dump() emits no whitespace: exactly RFC 7638's
  // canonical form for these ASCII members.
  impl->thumbprint = Base64UrlEncode(Sha256(m.dump()));
  impl->members = std::move(m);
  impl->pkey = std::move(pkey);
  return impl;
}

}  // namespace

// ---- PrivateKey ----------------------------------------------------------------------------

namespace {

std::string JwsHeaderB64(Algorithm alg, const std::string& kid) {
  nlohmann::json header = {{"alg", AlgorithmName(alg)}, {"kid", kid}, {"typ", "JWT"}};
  return Base64UrlEncode(header.dump());
}

}  // namespace

// Signing contexts are initialised once (sign_init, padding, digest) and then reused; a context
// serves one thread at a time, so the pool hands them out under a mutex held only for the
// checkout.
struct PrivateKey::Impl {
  PkeyPtr pkey;
  Algorithm alg = Algorithm::kRS256;
  std::string jws_header_b64;
  std::mutex mu;
  std::vector<EVP_PKEY_CTX*> free_ctx;

  ~Impl() {
    for (EVP_PKEY_CTX* c : free_ctx) EVP_PKEY_CTX_free(c);
  }

  absl::StatusOr<PkeyCtxPtr> Acquire() {
    {
      std::lock_guard lock(mu);
      if (!free_ctx.empty()) {
        PkeyCtxPtr c(free_ctx.back());
        free_ctx.pop_back();
        return c;
      }
    }
    PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey.get(), nullptr));
    if (!ctx || EVP_PKEY_sign_init(ctx.get()) != 1) return OpenSslError("EVP_PKEY_sign_init");
    if (alg == Algorithm::kRS256 &&
        EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PADDING) != 1) {
      return OpenSslError("RSA padding");
    }
    if (EVP_PKEY_CTX_set_signature_md(ctx.get(), EVP_sha256()) != 1) {
      return OpenSslError("signature digest");
    }
    return ctx;
  }

  void Release(PkeyCtxPtr ctx) {
    std::lock_guard lock(mu);
    free_ctx.push_back(ctx.release());
  }
};

absl::StatusOr<PrivateKey> PrivateKey::Generate(Algorithm alg) {
  EVP_PKEY* raw = alg == Algorithm::kRS256
                      ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048))
                      : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (raw == nullptr) return OpenSslError("generating key");
  PrivateKey out;
  out.impl_ = std::make_shared<Impl>();
  out.impl_->pkey.reset(raw);
  out.impl_->alg = alg;
  out.pub_.alg_ = alg;
  // The public half shares the OpenSSL key (reference counted).
  EVP_PKEY_up_ref(raw);
  WISP_ASSIGN_OR_RETURN(auto pub, MakePublicImpl(PkeyPtr(raw), alg));
  out.pub_.impl_ = std::move(pub);
  out.pub_.kid_ = out.pub_.impl_->thumbprint;
  out.impl_->jws_header_b64 = JwsHeaderB64(alg, out.pub_.kid_);
  return out;
}

absl::StatusOr<PrivateKey> PrivateKey::FromPem(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EVP_PKEY* raw = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (raw == nullptr) {
    internal::LastError();
    return absl::InvalidArgumentError("not a PEM private key");
  }
  PkeyPtr pkey(raw);
  WISP_ASSIGN_OR_RETURN(Algorithm alg, AlgorithmOf(pkey.get()));
  PrivateKey out;
  out.impl_ = std::make_shared<Impl>();
  out.impl_->alg = alg;
  EVP_PKEY_up_ref(raw);
  out.impl_->pkey = std::move(pkey);
  out.pub_.alg_ = alg;
  WISP_ASSIGN_OR_RETURN(auto pub, MakePublicImpl(PkeyPtr(raw), alg));
  out.pub_.impl_ = std::move(pub);
  out.pub_.kid_ = out.pub_.impl_->thumbprint;
  out.impl_->jws_header_b64 = JwsHeaderB64(alg, out.pub_.kid_);
  return out;
}

absl::StatusOr<std::string> PrivateKey::ToPem() const {
  if (!impl_) return absl::FailedPreconditionError("empty private key");
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), impl_->pkey.get(), nullptr, nullptr, 0, nullptr,
                                       nullptr) != 1) {
    return OpenSslError("writing private key");
  }
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio.get(), &data);
  std::string out(data, static_cast<size_t>(len));
  OPENSSL_cleanse(data, static_cast<size_t>(len));
  return out;
}

const std::string& PrivateKey::EncodedJwsHeader() const {
  static const std::string kEmpty;
  return impl_ ? impl_->jws_header_b64 : kEmpty;
}

absl::StatusOr<std::string> PrivateKey::Sign(std::string_view signing_input) const {
  if (!impl_) return absl::FailedPreconditionError("empty private key");
  const std::string digest = Sha256(signing_input);
  WISP_ASSIGN_OR_RETURN(PkeyCtxPtr ctx, impl_->Acquire());
  unsigned char buf[512];
  size_t len = sizeof(buf);
  const int rc = EVP_PKEY_sign(
      ctx.get(), buf, &len, reinterpret_cast<const unsigned char*>(digest.data()), digest.size());
  impl_->Release(std::move(ctx));
  if (rc != 1) return OpenSslError("EVP_PKEY_sign");
  std::string sig(reinterpret_cast<char*>(buf), len);
  if (impl_->alg == Algorithm::kES256) return EcdsaDerToRaw(sig, kP256Half);
  return sig;
}

}  // namespace wisp::jwt
