#include "wisp/status/status.hpp"

#include <gtest/gtest.h>

#include "wisp/status/fake_clock.hpp"

namespace wisp {
namespace {

absl::StatusOr<int> Half(int n) {
  if (n % 2 != 0) return absl::InvalidArgumentError("n: must be even");
  return n / 2;
}

absl::StatusOr<int> Quarter(int n) {
  WISP_ASSIGN_OR_RETURN(int half, Half(n));
  WISP_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int n) {
  WISP_RETURN_IF_ERROR(Half(n).status());
  return absl::OkStatus();
}

// Tests that the macros pass values through and return the first error unchanged.
TEST(StatusTest, MacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(3).message(), "n: must be even");
}

// Tests that code names round-trip through both their numeric and their canonical form.
TEST(StatusTest, CodeNamesRoundTrip) {
  for (int i = 0; i <= 16; ++i) {
    auto code = static_cast<absl::StatusCode>(i);
    SCOPED_TRACE(i);
    EXPECT_EQ(ParseStatusCode(StatusCodeName(code)), code);
    EXPECT_EQ(ParseStatusCode(std::to_string(i)), code);
  }
  EXPECT_EQ(ParseStatusCode("bogus"), absl::StatusCode::kUnknown);
  EXPECT_EQ(ParseStatusCode("99"), absl::StatusCode::kUnknown);
}

// Tests that Annotate keeps the code and prefixes the message.
TEST(StatusTest, AnnotateKeepsCode) {
  auto s = Annotate(absl::NotFoundError("no key"), "loading keys");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading keys: no key");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

// Tests that FakeClock moves only when advanced.
TEST(FakeClockTest, AdvancesOnlyWhenTold) {
  FakeClock clock;
  auto t0 = clock.Now();
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(clock.Now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace wisp
