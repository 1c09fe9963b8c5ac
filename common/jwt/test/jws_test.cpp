#include "wisp/jwt/jws.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <gtest/gtest.h>

#include "wisp/jwt/base64url.hpp"

namespace wisp::jwt {
namespace {

constexpr int64_t kNow = 1'800'000'000;

std::string Claims(int64_t exp, int64_t nbf = kNow - 10) {
  nlohmann::json c = {{"iss", "https://wisp.test"},
                      {"sub", "system:serviceaccount:ns:sa"},
                      {"aud", {"vault", "sts.amazonaws.com"}},
                      {"exp", exp},
                      {"nbf", nbf},
                      {"iat", kNow - 10}};
  return c.dump();
}

// Builds header.payload.signature by hand (for forged tokens).
std::string Compact(const nlohmann::json& header, std::string_view payload, std::string_view sig) {
  return Base64UrlEncode(header.dump()) + "." + Base64UrlEncode(payload) + "." +
         Base64UrlEncode(sig);
}

VerifyOptions Options() {
  VerifyOptions o;
  o.issuer = "https://wisp.test";
  o.audiences = {"vault"};
  o.now_unix = kNow;
  return o;
}

class JwsTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  void SetUp() override {
    key_ = *PrivateKey::Generate(GetParam());
    keys_.Add(key_.public_key());
  }
  PrivateKey key_;
  KeySet keys_;
};

// Tests that a signed token verifies and yields its claims, kid and alg.
TEST_P(JwsTest, SignsAndVerifies) {
  auto token = Sign(key_, Claims(kNow + 600));
  ASSERT_TRUE(token.ok()) << token.status();
  auto v = Verify(*token, keys_, Options());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->claims["sub"], "system:serviceaccount:ns:sa");
  EXPECT_EQ(v->kid, key_.kid());
  EXPECT_EQ(v->alg, GetParam());
  auto d = Decode(*token);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->header["typ"], "JWT");
  EXPECT_EQ(d->alg, AlgorithmName(GetParam()));
}

// Tests that changing one byte of the payload breaks the signature.
TEST_P(JwsTest, RefusesTamperedPayload) {
  auto token = *Sign(key_, Claims(kNow + 600));
  auto d = *Decode(token);
  nlohmann::json claims = d.claims;
  claims["sub"] = "system:serviceaccount:kube-system:admin";
  const size_t d1 = token.find('.');
  const size_t d2 = token.find('.', d1 + 1);
  std::string forged = token.substr(0, d1 + 1) + Base64UrlEncode(claims.dump()) + token.substr(d2);
  auto v = Verify(forged, keys_, Options());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(std::string(v.status().message()).find("signature"), std::string::npos);
}

// Tests that "alg":"none" with an empty signature is refused.
TEST_P(JwsTest, RefusesAlgNone) {
  for (const char* none : {"none", "None", "NONE"}) {
    SCOPED_TRACE(none);
    std::string token = Compact({{"alg", none}, {"kid", key_.kid()}}, Claims(kNow + 600), "");
    auto v = Verify(token, keys_, Options());
    ASSERT_FALSE(v.ok());
    EXPECT_NE(std::string(v.status().message()).find("refused"), std::string::npos);
  }
}

// Tests that HS256 keyed with the public key (the classic algorithm confusion) is refused.
TEST_P(JwsTest, RefusesHs256SignedWithPublicKey) {
  const std::string pem = *key_.public_key().ToPem();
  const std::string jwk = key_.public_key().Jwk().dump();
  for (const std::string& secret : {pem, jwk}) {
    nlohmann::json header = {{"alg", "HS256"}, {"kid", key_.kid()}, {"typ", "JWT"}};
    std::string input = Base64UrlEncode(header.dump()) + "." + Base64UrlEncode(Claims(kNow + 600));
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &mac_len);
    std::string token =
        input + "." + Base64UrlEncode(std::string(reinterpret_cast<char*>(mac), mac_len));
    auto v = Verify(token, keys_, Options());
    ASSERT_FALSE(v.ok());
    EXPECT_NE(std::string(v.status().message()).find("HS256"), std::string::npos);
  }
}

// Tests that a header claiming the other asymmetric algorithm for this key is refused.
TEST_P(JwsTest, RefusesAlgorithmKeyMismatch) {
  const char* other = GetParam() == Algorithm::kRS256 ? "ES256" : "RS256";
  std::string input = Base64UrlEncode(nlohmann::json{{"alg", other}, {"kid", key_.kid()}}.dump()) +
                      "." + Base64UrlEncode(Claims(kNow + 600));
  std::string token = input + "." + Base64UrlEncode(*key_.Sign(input));
  auto v = Verify(token, keys_, Options());
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.status().message()).find("does not match key"), std::string::npos);
}

// Tests that a token whose kid is not in the key set is refused, even if validly signed.
TEST_P(JwsTest, RefusesUnknownKid) {
  auto other = *PrivateKey::Generate(GetParam());
  auto token = *Sign(other, Claims(kNow + 600));
  auto v = Verify(token, keys_, Options());
  ASSERT_FALSE(v.ok());
  EXPECT_NE(std::string(v.status().message()).find("not a known key"), std::string::npos);
}

// Tests exp and nbf against the clock, with and without leeway.
TEST_P(JwsTest, ChecksTimeClaimsWithLeeway) {
  struct Case {
    const char* name;
    int64_t exp, nbf, leeway;
    bool ok;
  } cases[] = {
      {"valid", kNow + 1, kNow - 1, 0, true},
      {"expired now", kNow, kNow - 100, 0, false},
      {"expired within leeway", kNow - 30, kNow - 100, 60, true},
      {"expired beyond leeway", kNow - 61, kNow - 100, 60, false},
      {"not yet valid", kNow + 600, kNow + 10, 0, false},
      {"nbf within leeway", kNow + 600, kNow + 10, 60, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto token = *Sign(key_, Claims(c.exp, c.nbf));
    auto opts = Options();
    opts.leeway = std::chrono::seconds(c.leeway);
    EXPECT_EQ(Verify(token, keys_, opts).ok(), c.ok);
  }
}

// Tests that issuer and audience must match when asked.
TEST_P(JwsTest, ChecksIssuerAndAudience) {
  auto token = *Sign(key_, Claims(kNow + 600));
  auto opts = Options();
  opts.audiences = {"other"};
  EXPECT_FALSE(Verify(token, keys_, opts).ok());
  opts.audiences = {"other", "sts.amazonaws.com"};
  EXPECT_TRUE(Verify(token, keys_, opts).ok());
  opts.issuer = "https://evil.test";
  EXPECT_FALSE(Verify(token, keys_, opts).ok());
}

// Tests that a token without exp is refused unless exp is optional.
TEST_P(JwsTest, RequiresExp) {
  auto token = *Sign(key_, R"({"sub":"x"})");
  VerifyOptions opts;
  opts.now_unix = kNow;
  EXPECT_FALSE(Verify(token, keys_, opts).ok());
  opts.require_exp = false;
  EXPECT_TRUE(Verify(token, keys_, opts).ok());
}

INSTANTIATE_TEST_SUITE_P(Algs, JwsTest, ::testing::Values(Algorithm::kRS256, Algorithm::kES256));

// Tests that malformed tokens are refused without crashing.
TEST(JwsDecodeTest, RefusesMalformedTokens) {
  KeySet keys;
  keys.Add(PrivateKey::Generate(Algorithm::kES256)->public_key());
  for (const char* bad : {"", "a", "a.b", "a.b.c.d", "!!.e30.", "e30.!!.", "W10.e30.", "e30.W10.",
                          "e30.e30.", "eyJhbGciOiJFUzI1NiJ9.e30.AAAA"}) {
    SCOPED_TRACE(bad);
    auto v = Verify(bad, keys, {});
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kUnauthenticated);
  }
}

// Tests that a JWKS document round-trips and that foreign key types are skipped.
TEST(KeySetTest, JwksRoundTripsAndSkipsForeignKeys) {
  KeySet keys;
  auto rs = *PrivateKey::Generate(Algorithm::kRS256);
  auto es = *PrivateKey::Generate(Algorithm::kES256);
  keys.Add(rs.public_key());
  keys.Add(es.public_key());
  nlohmann::json jwks = keys.ToJwks();
  jwks["keys"].push_back({{"kty", "oct"}, {"k", "AAAA"}});
  auto back = KeySet::FromJwks(jwks.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), 2u);
  EXPECT_NE(back->Find(rs.kid()), nullptr);
  EXPECT_NE(back->Find(es.kid()), nullptr);
  EXPECT_FALSE(KeySet::FromJwks("{}").ok());
  EXPECT_FALSE(KeySet::FromJwks(R"({"keys":[{"kty":"RSA","n":"AA"}]})").ok());
}

}  // namespace
}  // namespace wisp::jwt
