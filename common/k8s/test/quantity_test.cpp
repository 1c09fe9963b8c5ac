#include "wisp/k8s/quantity.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace wisp::k8s {
namespace {

// Tests that Kubernetes quantity spellings parse to their values.
TEST(QuantityTest, ParsesKubernetesSuffixes) {
  struct Case {
    const char* text;
    long double value;
  } cases[] = {{"0", 0},
               {"250m", 0.25},
               {"1", 1},
               {"1.5", 1.5},
               {"256Mi", 268435456},
               {"5Gi", 5368709120.0L},
               {"10Gi", 10737418240.0L},
               {"1k", 1000},
               {"1M", 1e6},
               {"1e3", 1000},
               {"+2", 2},
               {"-1", -1},
               {"1Ki", 1024},
               {"100n", 1e-7L},
               {".5", 0.5}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    auto q = ParseQuantity(c.text);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_NEAR(static_cast<double>(q->value()), static_cast<double>(c.value),
                std::abs(static_cast<double>(c.value)) * 1e-12 + 1e-15);
    EXPECT_EQ(q->text(), c.text);
  }
  EXPECT_TRUE(ParseQuantity("0Mi")->IsZero());
  EXPECT_EQ(ParseQuantity("10Gi")->Bytes(), 10737418240LL);
  EXPECT_EQ(ParseQuantity("1500m")->Bytes(), 2);
}

// Tests that anything outside the grammar is refused with Kubernetes' message.
TEST(QuantityTest, RejectsGarbage) {
  for (const char* text : {"", "abc", "1Xi", "1..2", "m", "1 Gi", "1e", "1Gb", "--1"}) {
    SCOPED_TRACE(text);
    auto q = ParseQuantity(text);
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(std::string(q.status().message()), std::string(kQuantityRegexMessage));
  }
}

}  // namespace
}  // namespace wisp::k8s
