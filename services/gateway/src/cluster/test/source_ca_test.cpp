#include "cluster/source_ca.hpp"

#include <gtest/gtest.h>

#include "wisp/kube/testing/fake_apiserver.hpp"

namespace wisp::gateway::cluster {
namespace {

using kube::Json;
using kube::testing::FakeApiServer;

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

class SourceCaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_.Put(kube::kPersistentVolumeClaims,
             Json::parse(R"({"metadata":{"name":"disk","namespace":"vms","uid":"u1"},
                 "spec":{"dataSourceRef":{"apiGroup":"wisp.dev","kind":"VolumeImportSource",
                                          "name":"golden"}}})"));
    api_.Put(kube::kPersistentVolumeClaims,
             Json::parse(R"({"metadata":{"name":"wisp-prime-u1","namespace":"vms",
                 "annotations":{"wisp.dev/prime-for":"disk"}},"spec":{}})"));
  }
  void PutSource(const std::string& http_json) {
    api_.Put(
        kube::kVolumeImportSources, Json::parse(R"({"metadata":{"name":"golden","namespace":"vms"},
                 "spec":{"source":{"http":)" + http_json +
                                                "}}}"));
  }
  FakeApiServer api_;
};

// Tests that a prime PVC leads to its PVC's VolumeImportSource and the ConfigMap it names, whose
// values (data and binaryData, key order, dot-files skipped) make the bundle.
TEST_F(SourceCaTest, ReadsTheBundleThroughThePrime) {
  PutSource(R"({"url":"https://m/x","certConfigMap":"mirror-ca"})");
  api_.Put(kube::kConfigMaps, Json{{"metadata", {{"name", "mirror-ca"}, {"namespace", "vms"}}},
                                   {"data", {{"b.crt", "B"}, {"a.crt", kPem}, {".hidden", "H"}}},
                                   {"binaryData", {{"c.crt", "Qw=="}}}});
  auto ca = ReadSourceCa(api_, "vms", "wisp-prime-u1");
  ASSERT_TRUE(ca.ok()) << ca.status();
  ASSERT_TRUE(ca->has_value());
  EXPECT_EQ((*ca)->config_map(), "mirror-ca");
  EXPECT_EQ((*ca)->ca_pem(), std::string(kPem) + "B\nC\n");
  // The PVC itself (no prime) reads the same.
  auto direct = ReadSourceCa(api_, "vms", "disk");
  ASSERT_TRUE(direct.ok() && direct->has_value());
}

// Tests that nothing is read when there is nothing to read: no certConfigMap, no such PVC, a PVC
// naming another kind, or a VolumeImportSource not stored yet.
TEST_F(SourceCaTest, NoneWithoutACertConfigMap) {
  EXPECT_FALSE(ReadSourceCa(api_, "vms", "wisp-prime-u1")->has_value());  // source not stored
  PutSource(R"({"url":"https://m/x"})");
  EXPECT_FALSE(ReadSourceCa(api_, "vms", "wisp-prime-u1")->has_value());
  EXPECT_FALSE(ReadSourceCa(api_, "vms", "absent")->has_value());
  api_.Put(kube::kPersistentVolumeClaims,
           Json::parse(R"({"metadata":{"name":"other","namespace":"vms"},
               "spec":{"dataSourceRef":{"apiGroup":"example.io","kind":"Thing","name":"t"}}})"));
  EXPECT_FALSE(ReadSourceCa(api_, "vms", "other")->has_value());
}

// Tests that a PVC without a dataSourceRef reads the DataVolume of its name (CDI made the PVC).
TEST_F(SourceCaTest, ReadsTheDataVolumeOfAPlainPvc) {
  api_.Put(kube::kPersistentVolumeClaims,
           Json::parse(R"({"metadata":{"name":"fedora","namespace":"vms"},"spec":{}})"));
  api_.Put(kube::kDataVolumes, Json::parse(R"({"metadata":{"name":"fedora","namespace":"vms"},
               "spec":{"source":{"http":{"url":"https://m/x","certConfigMap":"mirror-ca"}}}})"));
  api_.Put(kube::kConfigMaps, Json{{"metadata", {{"name", "mirror-ca"}, {"namespace", "vms"}}},
                                   {"data", {{"ca.crt", kPem}}}});
  auto ca = ReadSourceCa(api_, "vms", "fedora");
  ASSERT_TRUE(ca.ok()) << ca.status();
  ASSERT_TRUE(ca->has_value());
  EXPECT_EQ((*ca)->ca_pem(), kPem);
}

// Tests that a ConfigMap not there yet is Unavailable (the import waits, as CDI's pod does) and
// one without a certificate FailedPrecondition, both naming the ConfigMap and the field.
TEST_F(SourceCaTest, MissingOrEmptyConfigMapFailsNamingIt) {
  PutSource(R"({"url":"https://m/x","certConfigMap":"mirror-ca"})");
  auto missing = ReadSourceCa(api_, "vms", "wisp-prime-u1");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(missing.status().message(),
            "ConfigMap vms/mirror-ca, named by wisp.dev VolumeImportSource vms/golden "
            "spec.source.http.certConfigMap, does not exist yet; retry");
  api_.Put(kube::kConfigMaps, Json{{"metadata", {{"name", "mirror-ca"}, {"namespace", "vms"}}},
                                   {"data", {{"ca.crt", "not a certificate"}}}});
  auto empty = ReadSourceCa(api_, "vms", "wisp-prime-u1");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(empty.status().message(),
            "ConfigMap vms/mirror-ca, named by wisp.dev VolumeImportSource vms/golden "
            "spec.source.http.certConfigMap, holds no PEM certificate");
}

}  // namespace
}  // namespace wisp::gateway::cluster
