#pragma once
// PopulatorServiceTest: the fixture the VolumeService and UploadService tests share: a fresh
// directory per test, the test images, and a VolumeService serving on an InMemoryBus with a
// FakeClock.
//
// Contract: SetUpService() makes root_ = FreshTestDir(prefix) and images_ = root_/images holding
// disk.raw (8 MiB, one random MiB at 2 MiB) and its disk.qcow2, runs `more_images` (a shell command
// in images_) for the test's other files, then opens the volumes and sources buckets and starts
// service_ for node "node-a" with its volumes under root_/vols. A failed step is a fatal test
// failure (check HasFatalFailure()). TearDown() removes root_.
//
// Example:
//   class UploadServiceTest : public PopulatorServiceTest {
//     void SetUp() override {
//       SetUpService("wisp-up", "gzip -1 -c disk.raw > disk.raw.gz");
//       if (HasFatalFailure()) return;
//       ...
//     }
//   };
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "fresh_test_dir.hpp"
#include "importer.hpp"
#include "volume_service.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/populator/testing/test_http_server.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::populator {

class PopulatorServiceTest : public ::testing::Test {
 protected:
  static constexpr int64_t kCap = 16 << 20;  // the capacity the tests give their volumes

  void SetUpService(const std::string& prefix, const std::string& more_images) {
    root_ = FreshTestDir(prefix);
    images_ = root_ + "/images";
    std::filesystem::create_directories(images_);
    ASSERT_EQ(testing::Sh("cd " + images_ +
                          " && truncate -s 8M disk.raw && dd if=/dev/urandom of=disk.raw bs=1M "
                          "count=1 seek=2 conv=notrunc status=none && qemu-img convert -f raw -O "
                          "qcow2 disk.raw disk.qcow2 && " +
                          more_images),
              0);
    volumes_ = *bus_.OpenBucket({.name = std::string(bus::buckets::kVolumes)});
    sources_ = *bus_.OpenBucket({.name = std::string(bus::buckets::kSources)});
    service_ = std::make_unique<VolumeService>(
        bus_, *volumes_, *sources_, metrics_, clock_,
        VolumeServiceConfig{.node_name = "node-a", .volume_root = root_ + "/vols"});
    ASSERT_TRUE(service_->Serve().ok());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string Disk(const std::string& id) { return root_ + "/vols/" + id + "/disk.img"; }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  bus::KeyValuePtr volumes_, sources_;
  prometheus::Registry registry_;
  PopulatorMetrics metrics_{registry_};
  Importer importer_{Importer::Options{}};
  std::unique_ptr<VolumeService> service_;
  std::string root_, images_;
};

}  // namespace wisp::populator
