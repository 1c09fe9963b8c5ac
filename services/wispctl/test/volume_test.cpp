#include "volume.hpp"

#include <gtest/gtest.h>

namespace wisp::wispctl {
namespace {

// Tests that sizes parse in binary and decimal units and bad ones name the flag.
TEST(VolumeCliTest, ParsesQuantities) {
  EXPECT_EQ(*ParseQuantity("10Gi", "--capacity"), 10ll << 30);
  EXPECT_EQ(*ParseQuantity("512Mi", "--capacity"), 512ll << 20);
  EXPECT_EQ(*ParseQuantity("1G", "--capacity"), 1000000000);
  EXPECT_EQ(*ParseQuantity("4096", "--capacity"), 4096);
  auto bad = ParseQuantity("ten", "--capacity");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("--capacity"), std::string::npos);
  EXPECT_FALSE(ParseQuantity("0", "--capacity").ok());
  EXPECT_FALSE(ParseQuantity("5Xi", "--capacity").ok());
}

// Tests that the progress bar fills with the ratio and shows N/A when unknown.
TEST(VolumeCliTest, DrawsProgressBar) {
  EXPECT_EQ(ProgressBar(0.5, 10), "[#####.....]  50.00%");
  EXPECT_EQ(ProgressBar(1.0, 4), "[####] 100.00%");
  EXPECT_EQ(ProgressBar(std::nullopt, 9).find("N/A") != std::string::npos, true);
}

// Tests that phases print in CDI's spelling and a status shows its message.
TEST(VolumeCliTest, FormatsStatus) {
  v1::VolumeStatus s;
  s.set_volume_id("v-0123456789abcdef01234567");
  s.mutable_spec()->set_name("cirros");
  s.set_phase(v1::FAILED);
  s.set_progress("N/A");
  s.set_message("HTTP 404 Not Found from http://x/y");
  std::string out = FormatVolume(s);
  EXPECT_NE(out.find("Phase:     Failed"), std::string::npos);
  EXPECT_NE(out.find("Message:   HTTP 404"), std::string::npos);
  EXPECT_EQ(PhaseName(v1::PENDING_POPULATION), "PendingPopulation");
  EXPECT_NE(FormatVolumeTable({s}).find("cirros"), std::string::npos);
  EXPECT_NE(FormatVolumeJson(s).find("\"volume_id\""), std::string::npos);
}

// Tests that header files parse and malformed lines are refused with their number.
TEST(VolumeCliTest, ParsesHeaderLines) {
  auto h = ParseHeaderLines("# auth\nAuthorization: Bearer x\n\nX-Y:z\n", "--headers-file");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->size(), 2u);
  EXPECT_EQ((*h)[0].second, "Bearer x");
  EXPECT_EQ((*h)[1].first, "X-Y");
  auto bad = ParseHeaderLines("oops\n", "--headers-file");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("line 1"), std::string::npos);
}

}  // namespace
}  // namespace wisp::wispctl
