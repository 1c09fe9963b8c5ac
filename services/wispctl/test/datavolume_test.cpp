#include "datavolume.hpp"

#include <gtest/gtest.h>

namespace wisp::wispctl {
namespace {

using Json = nlohmann::json;

Json UploadDataVolume(const std::string& phase, const std::string& volume_id = "") {
  Json dv = {{"apiVersion", "cdi.kubevirt.io/v1beta1"},
             {"kind", "DataVolume"},
             {"metadata", {{"name", "fedora"}, {"namespace", "vms"}}},
             {"spec", {{"source", {{"upload", Json::object()}}}}},
             {"status",
              {{"phase", phase},
               {"conditions",
                {{{"type", "Ready"}, {"status", "False"}, {"message", "ready says"}},
                 {{"type", "Running"}, {"status", "False"}, {"message", "running says"}}}}}}};
  if (!volume_id.empty()) {
    dv["metadata"]["annotations"] = {{"wisp.dev/upload-volume-id", volume_id}};
  }
  return dv;
}

// Tests that the upload target is the annotated volume of an UploadReady DataVolume.
TEST(UploadVolumeOf, IsTheAnnotatedVolumeOnceUploadReady) {
  auto id = UploadVolumeOf(UploadDataVolume("UploadReady", "v-0123abcd"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "v-0123abcd");
}

// Tests that a DataVolume on its way to UploadReady is "wait" (Unavailable), saying why.
TEST(UploadVolumeOf, WaitsUntilUploadReadyAndAnnotated) {
  for (const auto& [phase, id] :
       std::vector<std::pair<std::string, std::string>>{{"", ""},
                                                        {"Pending", ""},
                                                        {"PendingPopulation", ""},
                                                        {"UploadScheduled", ""},
                                                        {"UploadReady", ""},
                                                        {"UploadScheduled", "v-1"}}) {
    SCOPED_TRACE(phase + " " + id);
    auto got = UploadVolumeOf(UploadDataVolume(phase, id));
    ASSERT_TRUE(absl::IsUnavailable(got.status())) << got.status();
    EXPECT_NE(got.status().message().find("DataVolume vms/fedora is "), std::string::npos);
    EXPECT_NE(got.status().message().find("not UploadReady yet: running says"), std::string::npos)
        << got.status();
  }
}

// Tests that what will never take an upload is refused at once, naming why.
TEST(UploadVolumeOf, RefusesWhatTakesNoUpload) {
  Json http = UploadDataVolume("ImportInProgress");
  http["spec"]["source"] = {{"http", {{"url", "https://x/y"}}}};
  auto got = UploadVolumeOf(http);
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status()));
  EXPECT_EQ(got.status().message(),
            "DataVolume vms/fedora is not an upload DataVolume (it has source.http, not "
            "spec.source.upload)");

  got = UploadVolumeOf(UploadDataVolume("Succeeded", "v-1"));
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status()));
  got = UploadVolumeOf(UploadDataVolume("Failed", "v-1"));
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status()));
  EXPECT_EQ(got.status().message(), "DataVolume vms/fedora is Failed: ready says");
}

TEST(ParseNamespacedName, TakesNamespaceSlashNameOrANameInTheDefault) {
  EXPECT_EQ(*ParseNamespacedName("vms/fedora", "default"),
            std::make_pair(std::string("vms"), std::string("fedora")));
  EXPECT_EQ(*ParseNamespacedName("fedora", "apps"),
            std::make_pair(std::string("apps"), std::string("fedora")));
  for (const char* bad : {"", "/x", "vms/", "a/b/c"}) {
    SCOPED_TRACE(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(ParseNamespacedName(bad, "default").status()));
  }
}

}  // namespace
}  // namespace wisp::wispctl
