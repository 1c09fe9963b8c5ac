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

}  // namespace
}  // namespace wisp::k8s
