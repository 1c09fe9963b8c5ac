#pragma once
// Where the Kubernetes API is and how to authenticate to it: in-cluster (the pod's service account)
// or a kubeconfig file, for running out of cluster. Bearer tokens from a file are re-read as
// kubelet rotates them (TokenSource).
//
// Contract:
//   - LoadInCluster() reads KUBERNETES_SERVICE_HOST/PORT and the service account's token, ca.crt
//     and namespace under /var/run/secrets/kubernetes.io/serviceaccount (every path and the two
//     variables can be overridden, for tests). The token is not read here: Config names its file,
//     and the client's TokenSource reads it. A missing variable or CA is FailedPrecondition naming
//     it; no namespace file means "default".
//   - LoadKubeconfig(path, context) reads a kubeconfig (yaml-cpp): the named context, else
//     current-context; its cluster (server, certificate-authority or -data, tls-server-name) and
//     user (client-certificate(-data), client-key(-data), token, tokenFile). Relative paths are
//     resolved against the kubeconfig's directory; -data fields are base64 PEM. Refused with
//     InvalidArgument naming the file and the entry: insecure-skip-tls-verify (wisp always
//     verifies the server), exec and auth-provider users (wisp runs no credential plugins),
//     username/password, a cluster without server, a context naming a cluster or user that is
//     not there.
//   - LoadFromEnvironment(): KUBECONFIG (only its first file is read, when it lists several; the
//     Config's origin says so), else in-cluster when KUBERNETES_SERVICE_HOST is set, else
//     $HOME/.kube/config.
//   - TokenSource: a static token, or a token file re-read at most once per `refresh` (a minute,
//     as client-go does) and whenever Invalidate() was called (after a 401). A read failure keeps
//     the last good token. Thread-safe. Tokens are never logged nor put in a Status.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(kube::Config config, kube::LoadKubeconfig("/home/me/.kube/config"));
//   // config.server "https://127.0.0.1:6443", config.tls.ca_pem "-----BEGIN CERTIFICATE..."
//   WISP_ASSIGN_OR_RETURN(kube::Config in_cluster, kube::LoadInCluster());
//   kube::TokenSource tokens(in_cluster.token, in_cluster.token_file);
//   WISP_ASSIGN_OR_RETURN(std::string bearer, tokens.Token());
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "wisp/http/client.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/status/status.hpp"

namespace wisp::kube {

struct Config {
  std::string server;      // "https://10.96.0.1:443"
  http::TlsConfig tls;     // CA (pem or file), client certificate, server name
  std::string token;       // a static bearer token ("" = none)
  std::string token_file;  // a bearer token file, re-read as it rotates ("" = none)
  std::string default_namespace = "default";
  std::string origin;  // "in-cluster" or "kubeconfig <path>, context <name>": for messages
};

struct InClusterPaths {
  std::string dir = "/var/run/secrets/kubernetes.io/serviceaccount";  // token, ca.crt, namespace
  std::optional<std::string> host;  // instead of $KUBERNETES_SERVICE_HOST
  std::optional<std::string> port;  // instead of $KUBERNETES_SERVICE_PORT
};

absl::StatusOr<Config> LoadInCluster(const InClusterPaths& paths = {});
absl::StatusOr<Config> LoadKubeconfig(const std::string& path, const std::string& context = "");
absl::StatusOr<Config> LoadFromEnvironment();

class TokenSource {
 public:
  explicit TokenSource(std::string token = "", std::string token_file = "",
                       const Clock* clock = nullptr,
                       std::chrono::seconds refresh = std::chrono::minutes(1));
  // The current token ("" when there is none). Unavailable when the file was never readable.
  absl::StatusOr<std::string> Token();
  // The next Token() re-reads the file (after the apiserver said 401).
  void Invalidate();
  bool from_file() const { return !file_.empty(); }

 private:
  const std::string static_;
  const std::string file_;
  const Clock* clock_;
  const std::chrono::seconds refresh_;
  std::mutex mu_;
  std::string token_;
  bool loaded_ = false;
  std::chrono::steady_clock::time_point read_at_{};
};

}  // namespace wisp::kube
