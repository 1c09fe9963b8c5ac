#pragma once
// Proof of pod identity on wisp.v1.token.issue (docs/security.md, G3).
//
// A node gateway asks wisp-token for tokens on behalf of the pods of its node. Without a proof
// any holder of a gateway's NATS credentials could ask for any pod's token. With the policy's
// issue.requirePodProof, the request must carry (IssueRequest.pod_proof) the token the kubelet
// itself obtained for the pod from kube-apiserver's TokenRequest API (CSIDriver tokenRequests,
// delivered to NodePublishVolume in csi.storage.k8s.io/serviceAccount.tokens), and wisp-token
// issues only for the pod that token is bound to.
//
// Contract (CheckPodProof):
//   - issue.requirePodProof false: OK without looking at the proof (the default; wisp-token
//     without a policy file, the local stack).
//   - Otherwise, PermissionDenied with a message naming the field unless:
//       * pod_proof is set, and subject.pod_name / subject.pod_uid are set;
//       * its iss is one of issue.podProofIssuers (each a trustedIssuers entry), it verifies
//         against that issuer's JWKS, carries audience issue.podProofAudience and is within
//         exp/nbf (`leeway` allowed);
//       * sub = system:serviceaccount:<subject.namespace>:<subject.service_account>;
//       * kubernetes.io.pod.name = subject.pod_name and kubernetes.io.pod.uid = subject.pod_uid;
//       * kubernetes.io.node.name, when the proof has it, = subject.node_name;
//       * kubernetes.io.serviceaccount.uid, when both have it, = subject.service_account_uid.
//     Unavailable when the issuer's JWKS URL has never been fetched (retrying may work).
//   - The proof is never put in a message or log.
//
// Example:
//   WISP_RETURN_IF_ERROR(CheckPodProof(request, *policy, clock.NowUnixSeconds(), 60s));
#include <chrono>
#include <cstdint>

#include "policy.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::token {

absl::Status CheckPodProof(const v1::IssueRequest& request, const Policy& policy, int64_t now_unix,
                           std::chrono::seconds leeway);

}  // namespace wisp::token
