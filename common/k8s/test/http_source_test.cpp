#include "wisp/k8s/http_source.hpp"

#include <gtest/gtest.h>

namespace wisp::k8s {
namespace {

std::vector<std::string> Causes(const std::string& http_json) {
  std::vector<std::string> causes;
  ReadHttpSource(Json::parse(http_json), "spec.source.http", causes);
  return causes;
}

// Tests that credentials from Secrets are refused naming the field, the value and why.
TEST(HttpSourceTest, RefusesSecretsNamingTheFieldAndWhy) {
  auto causes =
      Causes(R"({"url":"https://m/x","secretRef":"mirror-auth","secretExtraHeaders":["token"]})");
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0],
            "spec.source.http.secretRef: Unsupported value: \"mirror-auth\": wisp-populator does "
            "not fetch with credentials from Secrets: an import's source is stored in JetStream "
            "(wisp_sources, the populate job stream), where a Secret's values must not go");
  EXPECT_EQ(causes[1].rfind("spec.source.http.secretExtraHeaders: Unsupported value: [\"token\"]: "
                            "wisp-populator does not fetch with credentials",
                            0),
            0u)
      << causes[1];
}

// Tests that CDI's "none" spellings pass: an empty secretRef or list, insecureSkipVerify false.
TEST(HttpSourceTest, EmptyValuesAreNone) {
  EXPECT_TRUE(Causes(R"({"url":"https://m/x","secretRef":"","secretExtraHeaders":[],
                         "insecureSkipVerify":false})")
                  .empty());
}

// Tests that insecureSkipVerify: true is refused, pointing at certConfigMap.
TEST(HttpSourceTest, RefusesInsecureSkipVerify) {
  auto causes = Causes(R"({"url":"https://m/x","insecureSkipVerify":true})");
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0],
            "spec.source.http.insecureSkipVerify: Unsupported value: true: wisp-populator always "
            "verifies the server's certificate; name a ConfigMap holding the CA that signed it in "
            "certConfigMap");
}

// Tests that certConfigMap and extraHeaders are read as CDI's importer applies them.
TEST(HttpSourceTest, ReadsCertConfigMapAndExtraHeaders) {
  std::vector<std::string> causes;
  HttpSourceExtras extras = ReadHttpSource(Json::parse(R"({"url":"https://m/x",
      "certConfigMap":"mirror-ca",
      "extraHeaders":["X-Mirror-Tenant: vms","Accept:application/octet-stream",
                      "X-Empty:", "X-Spaced:  a b \t"]})"),
                                           "spec.source.http", causes);
  EXPECT_TRUE(causes.empty()) << causes[0];
  EXPECT_EQ(extras.cert_config_map, "mirror-ca");
  using H = std::pair<std::string, std::string>;
  EXPECT_EQ(extras.headers, (std::vector<H>{{"X-Mirror-Tenant", "vms"},
                                            {"Accept", "application/octet-stream"},
                                            {"X-Empty", ""},
                                            {"X-Spaced", "a b"}}));
}

// Tests that each bad header or ConfigMap name is refused naming its index and why.
TEST(HttpSourceTest, RefusesBadHeadersAndConfigMapNames) {
  struct Case {
    std::string http;
    std::string cause;
  } cases[] = {
      {R"({"extraHeaders":["no colon"]})",
       "spec.source.http.extraHeaders[0]: Invalid value: \"no colon\": must be \"Name: value\" "
       "with a header name of letters, digits and !#$%&'*+-.^_`|~"},
      {R"({"extraHeaders":["Bad Name: x"]})",
       "spec.source.http.extraHeaders[0]: Invalid value: \"Bad Name: x\": must be \"Name: "
       "value\" with a header name of letters, digits and !#$%&'*+-.^_`|~"},
      {R"({"extraHeaders":["X-A: 1\r\nHost: evil"]})",
       "spec.source.http.extraHeaders[0]: Invalid value: \"X-A: 1\r\nHost: evil\": a header "
       "value may not hold control characters (CR, LF, ...)"},
      {R"({"extraHeaders":["X-A: 1","range: bytes=0-"]})",
       "spec.source.http.extraHeaders[1]: Forbidden: \"range\": wisp-populator sets this header "
       "itself (Range and If-Range resume an import; the others frame the request)"},
      {R"({"extraHeaders":["X-A: 1","x-a: 2"]})",
       "spec.source.http.extraHeaders[1]: Duplicate value: \"x-a\": give each header once"},
      {R"({"extraHeaders":[7]})",
       "spec.source.http.extraHeaders[0]: Invalid value: 7: must be \"Name: value\""},
      {R"({"certConfigMap":"Mirror_CA"})",
       "spec.source.http.certConfigMap: Invalid value: \"Mirror_CA\": a lowercase RFC 1123 "
       "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
       "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
       "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.http);
    auto causes = Causes(c.http);
    ASSERT_EQ(causes.size(), 1u);
    EXPECT_EQ(causes[0], c.cause);
  }
}

}  // namespace
}  // namespace wisp::k8s
