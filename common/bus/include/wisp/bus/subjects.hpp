#pragma once
// Every NATS subject, queue group, stream and bucket name wisp uses. Call sites never spell a
// subject as a string literal; they name a constant here (or call a builder for routed subjects).
// Versioned: wisp.v1.<service>.<verb>. Bodies are the protobuf messages of proto/wisp/v1.
//
// Who may publish or subscribe to a subject is not decided here. The NATS permissions live in
// scripts/nats-auth (one user per service, least privilege; local-up and the integration tests use
// its output), and the Helm chart's defaults, deploy/helm/wisp/files/nats-permissions.json, are
// `scripts/nats-auth --json` (scripts/check-deploy fails when they drift). A new subject needs
// an allow entry there for its caller (publish) and its server (subscribe); see the recipe "Add a
// subject" in docs/architecture.md.
#include <string>
#include <string_view>

namespace wisp::bus {

namespace subjects {
// wisp-policy: AdmissionCall -> AdmissionVerdict
inline constexpr std::string_view kPolicyMutate = "wisp.v1.policy.mutate";
inline constexpr std::string_view kPolicyValidate = "wisp.v1.policy.validate";
// wisp-policy: CommittedObject -> CommitResult (records follow what the apiserver stored)
inline constexpr std::string_view kPolicyRecord = "wisp.v1.policy.record";
// wisp-token
inline constexpr std::string_view kTokenIssue =
    "wisp.v1.token.issue";  // IssueRequest -> IssueResponse
inline constexpr std::string_view kTokenIssueBatch =
    "wisp.v1.token.issue_batch";  // IssueBatchRequest -> IssueBatchResponse
inline constexpr std::string_view kTokenExchange =
    "wisp.v1.token.exchange";  // ExchangeRequest -> ExchangeResponse
inline constexpr std::string_view kTokenKeys = "wisp.v1.token.keys";  // KeysRequest -> KeysResponse
inline constexpr std::string_view kTokenReview =
    "wisp.v1.token.review";  // ReviewRequest -> ReviewResponse
inline constexpr std::string_view kTokenUpload =
    "wisp.v1.token.upload";  // UploadTokenRequest -> UploadTokenResponse
inline constexpr std::string_view kTokenKeyAdmin =
    "wisp.v1.token.key_admin";  // KeyAdminRequest -> KeyAdminResponse (wispctl keys)
// Published by wisp-token whenever the key set changes (body: KeysResponse).
inline constexpr std::string_view kTokenKeysChanged = "wisp.v1.events.token.keys";
// wisp-populator
inline constexpr std::string_view kVolumeCreate = "wisp.v1.volume.create";
inline constexpr std::string_view kVolumeDelete = "wisp.v1.volume.delete";
inline constexpr std::string_view kVolumeGet = "wisp.v1.volume.get";
inline constexpr std::string_view kVolumeList = "wisp.v1.volume.list";
// JetStream work queue of population jobs: wisp.v1.jobs.populate.<node>
inline constexpr std::string_view kJobsPopulatePrefix = "wisp.v1.jobs.populate";
// Events: wisp.v1.events.volume.<id>
inline constexpr std::string_view kVolumeEventsPrefix = "wisp.v1.events.volume";
// Node-routed work: wisp.v1.node.<node>.<verb>
inline constexpr std::string_view kNodePrefix = "wisp.v1.node";

// NATS service ("micro") discovery, ADR-32.
inline constexpr std::string_view kSrvPing = "$SRV.PING";
inline constexpr std::string_view kSrvInfo = "$SRV.INFO";
inline constexpr std::string_view kSrvStats = "$SRV.STATS";

inline std::string VolumeEvents(std::string_view volume_id) {
  return std::string(kVolumeEventsPrefix) + "." + std::string(volume_id);
}
inline std::string PopulateJobs(std::string_view node) {
  return std::string(kJobsPopulatePrefix) + "." + std::string(node);
}
inline std::string Node(std::string_view node, std::string_view verb) {
  return std::string(kNodePrefix) + "." + std::string(node) + "." + std::string(verb);
}
// Uploads: the gateway opens a session on Node(node, kNodeUploadOpen) (queue group: any populator
// instance of the node) and sends the chunks to the answering instance's UploadChunks subject.
inline constexpr std::string_view kNodeUploadOpen = "upload.open";
inline std::string UploadChunks(std::string_view node, std::string_view instance) {
  return Node(node, "upload.i-" + std::string(instance));
}
}  // namespace subjects

namespace queues {
inline constexpr std::string_view kPolicy = "wisp-policy";
inline constexpr std::string_view kToken = "wisp-token";
inline constexpr std::string_view kPopulator = "wisp-populator";
inline constexpr std::string_view kGateway = "wisp-gateway";
}  // namespace queues

namespace streams {
inline constexpr std::string_view kPopulateJobs = "WISP_POPULATE";
inline constexpr std::string_view kPopulateDurable = "wisp-populator";
}  // namespace streams

namespace buckets {
inline constexpr std::string_view kVolumes = "wisp_volumes";
inline constexpr std::string_view kSources = "wisp_sources";
inline constexpr std::string_view kProjections = "wisp_projections";
inline constexpr std::string_view kKeys = "wisp_keys";
}  // namespace buckets

// Service names as they appear in $SRV discovery.
namespace services {
inline constexpr std::string_view kGateway = "wisp-gateway";
inline constexpr std::string_view kPolicy = "wisp-policy";
inline constexpr std::string_view kToken = "wisp-token";
inline constexpr std::string_view kPopulator = "wisp-populator";
}  // namespace services

}  // namespace wisp::bus
