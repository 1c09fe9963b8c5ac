#pragma once
// StripSecrets: a loggable rendering of a CSI message with every secret replaced, in the manner of
// kubernetes-csi's protosanitizer. A field is secret when the CSI proto marks it (csi_secret) or
// when it is the kubelet's service-account token map inside volume_context
// (csi.storage.k8s.io/serviceAccount.tokens), which the spec does not mark.
//
// Example:
//   SPDLOG_LOGGER_DEBUG(logger, "NodePublishVolume {}", StripSecrets(request));
//   // volume_id: "v" secrets { key: "k" value: "***stripped***" } ...
#include <string>

#include <google/protobuf/message.h>

namespace wisp::gateway::csi {

inline constexpr char kStripped[] = "***stripped***";
inline constexpr char kServiceAccountTokensKey[] = "csi.storage.k8s.io/serviceAccount.tokens";

std::string StripSecrets(const google::protobuf::Message& message);

}  // namespace wisp::gateway::csi
