#pragma once
// wispctl volume: create, get, list, watch and delete populated volumes over wisp.v1.volume.*.
//
//   wispctl volume create cirros --capacity 10Gi --url https://mirror/cirros.qcow2.xz --sha256 ...
//   wispctl volume create disk --capacity 1Gi --upload   # then: wispctl volume upload disk FILE
//   wispctl volume watch cirros        # phase and progress live; a bar on a terminal
//   wispctl volume get cirros --json
//   wispctl volume list
//   wispctl volume delete cirros
//
// watch subscribes to wisp.v1.events.volume.<id> before reading the current status (so nothing is
// missed), re-reads the status when events pause, and exits 0 on SUCCEEDED / PENDING_POPULATION /
// UPLOAD_READY (nothing happens until an upload), 1 on FAILED (printing the message).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/status/status.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::wispctl {

int RunVolume(const std::vector<std::string>& args);

// wisp.v1.volume.get by id (v-<24 hex>) or by name.
absl::StatusOr<v1::VolumeStatus> GetVolumeByRef(bus::Bus& bus, const std::string& ref,
                                                std::chrono::milliseconds timeout);

// "10Gi", "512Mi", "1G", "1048576" -> bytes; InvalidArgument naming `field`.
absl::StatusOr<int64_t> ParseQuantity(std::string_view text, std::string_view field);
// "[##########..........]  50.00%" of `width` cells; "[ ... N/A ... ]" style when unknown.
std::string ProgressBar(std::optional<double> ratio, int width);
// "IMPORT_IN_PROGRESS" -> "ImportInProgress" (CDI's phase spelling).
std::string PhaseName(v1::VolumePhase phase);
std::string FormatVolume(const v1::VolumeStatus& status);
std::string FormatVolumeTable(const std::vector<v1::VolumeStatus>& volumes);
std::string FormatVolumeJson(const v1::VolumeStatus& status);
// Parses "Name: value" lines (blank lines and # comments skipped).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseHeaderLines(
    std::string_view text, std::string_view field);

}  // namespace wisp::wispctl
