#include "wisp/jwt/key.hpp"

#include <gtest/gtest.h>

#include "wisp/jwt/base64url.hpp"

namespace wisp::jwt {
namespace {

// The example key of RFC 7638 section 3.1 and its thumbprint.
constexpr const char* kRfc7638Jwk = R"({
  "kty": "RSA",
  "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
  "e": "AQAB",
  "alg": "RS256",
  "kid": "2011-04-29"
})";
constexpr const char* kRfc7638Thumbprint = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs";

// Tests that the thumbprint of RFC 7638's example key is the one the RFC gives.
TEST(KeyTest, ThumbprintMatchesRfc7638Example) {
  auto key = PublicKey::FromJwk(nlohmann::json::parse(kRfc7638Jwk));
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->Thumbprint(), kRfc7638Thumbprint);
  EXPECT_EQ(key->kid(), "2011-04-29");  // an outside JWK keeps its own kid
}

class KeyAlgTest : public ::testing::TestWithParam<Algorithm> {};

// Tests that a generated key signs, verifies, and uses its thumbprint as kid.
TEST_P(KeyAlgTest, SignsAndVerifies) {
  auto key = PrivateKey::Generate(GetParam());
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->kid(), key->public_key().Thumbprint());
  auto sig = key->Sign("hello");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(sig->size(), GetParam() == Algorithm::kES256 ? 64u : 256u);
  EXPECT_TRUE(key->public_key().Verify("hello", *sig));
  EXPECT_FALSE(key->public_key().Verify("hellO", *sig));
  std::string bad = *sig;
  bad[5] ^= 1;
  EXPECT_FALSE(key->public_key().Verify("hello", bad));
}

// Tests that the public JWK round-trips to the same key and thumbprint.
TEST_P(KeyAlgTest, JwkRoundTrips) {
  auto key = PrivateKey::Generate(GetParam());
  ASSERT_TRUE(key.ok());
  nlohmann::json jwk = key->public_key().Jwk();
  EXPECT_EQ(jwk["alg"], AlgorithmName(GetParam()));
  EXPECT_EQ(jwk["use"], "sig");
  auto back = PublicKey::FromJwk(jwk);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Thumbprint(), key->kid());
  auto sig = key->Sign("x");
  EXPECT_TRUE(back->Verify("x", *sig));
}

// Tests that the private key survives PEM export and import.
TEST_P(KeyAlgTest, PemRoundTrips) {
  auto key = PrivateKey::Generate(GetParam());
  ASSERT_TRUE(key.ok());
  auto pem = key->ToPem();
  ASSERT_TRUE(pem.ok());
  auto back = PrivateKey::FromPem(*pem);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kid(), key->kid());
  auto sig = back->Sign("y");
  EXPECT_TRUE(key->public_key().Verify("y", *sig));
  auto pub_pem = key->public_key().ToPem();
  auto pub = PublicKey::FromPem(*pub_pem);
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->kid(), key->kid());
}

INSTANTIATE_TEST_SUITE_P(Algs, KeyAlgTest, ::testing::Values(Algorithm::kRS256, Algorithm::kES256));

// Tests that ECDSA DER and raw forms convert both ways with left padding.
TEST(KeyTest, EcdsaDerRawConversion) {
  std::string raw(64, '\0');
  raw[31] = 1;                        // r = 1
  raw[32] = static_cast<char>(0x80);  // s has its high bit set: DER needs a leading zero
  auto der = EcdsaRawToDer(raw);
  ASSERT_TRUE(der.ok());
  EXPECT_EQ(static_cast<unsigned char>((*der)[0]), 0x30);
  auto back = EcdsaDerToRaw(*der, 32);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, raw);
  EXPECT_FALSE(EcdsaDerToRaw("garbage", 32).ok());
  EXPECT_FALSE(EcdsaRawToDer("abc").ok());
}

// Tests that malformed or unacceptable JWKs are refused with the member named.
TEST(KeyTest, RefusesBadJwks) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"kty":"oct","k":"AAAA"})", "jwk.kty"},
      {R"({"kty":"RSA","e":"AQAB"})", "jwk.n"},
      {R"({"kty":"RSA","n":"AQAB","e":"AQAB"})", "2048"},
      {R"({"kty":"EC","crv":"P-384","x":"AA","y":"AA"})", "jwk.crv"},
      {R"({"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"})", "32 bytes"},
      {R"({"kty":"EC","crv":"P-256","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE","y":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE"})",
       "P-256"},
  };
  for (const auto& [json, want] : cases) {
    SCOPED_TRACE(json);
    auto key = PublicKey::FromJwk(nlohmann::json::parse(json));
    ASSERT_FALSE(key.ok());
    EXPECT_NE(std::string(key.status().message()).find(want), std::string::npos) << key.status();
  }
  nlohmann::json rsa_as_es = nlohmann::json::parse(kRfc7638Jwk);
  rsa_as_es["alg"] = "ES256";
  EXPECT_FALSE(PublicKey::FromJwk(rsa_as_es).ok());
}

// Tests that only RS256 and ES256 parse as algorithms.
TEST(KeyTest, ParsesOnlyAcceptedAlgorithms) {
  EXPECT_EQ(*ParseAlgorithm("RS256"), Algorithm::kRS256);
  EXPECT_EQ(*ParseAlgorithm("ES256"), Algorithm::kES256);
  for (const char* bad : {"none", "HS256", "PS256", "rs256", ""}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(ParseAlgorithm(bad).ok());
  }
}

}  // namespace
}  // namespace wisp::jwt
