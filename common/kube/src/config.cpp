#include "wisp/kube/config.hpp"

#include <cstdlib>
#include <filesystem>

#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/log/log.hpp"

namespace wisp::kube {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

// The value of `key` in a kubeconfig map as a string ("" when absent).
std::string Str(const YAML::Node& node, const char* key) {
  const YAML::Node v = node[key];
  if (!v || !v.IsScalar()) return "";
  return v.as<std::string>();
}

// The entry of a kubeconfig list ("clusters", "users", "contexts") whose name is `name`; its
// inner map (cluster:/user:/context:), or an undefined node.
YAML::Node FindNamed(const YAML::Node& root, const char* list, const char* inner,
                     const std::string& name) {
  const YAML::Node entries = root[list];
  if (!entries || !entries.IsSequence()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& e : entries) {
    if (Str(e, "name") == name) {
      const YAML::Node in = e[inner];
      return in ? in : YAML::Node(YAML::NodeType::Map);
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

absl::StatusOr<std::string> DecodeData(const std::string& b64, const std::string& what) {
  std::string out;
  if (!absl::Base64Unescape(b64, &out)) {
    return absl::InvalidArgumentError(what + " is not valid base64");
  }
  return out;
}

}  // namespace

absl::StatusOr<Config> LoadInCluster(const InClusterPaths& paths) {
  const std::string host = paths.host ? *paths.host : Env("KUBERNETES_SERVICE_HOST");
  const std::string port = paths.port ? *paths.port : Env("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set (is "
        "this running in a pod?)");
  }
  Config c;
  const bool v6 = host.find(':') != std::string::npos;
  c.server = "https://" + (v6 ? "[" + host + "]" : host) + ":" + port;
  c.tls.ca_file = paths.dir + "/ca.crt";
  if (!fs::exists(c.tls.ca_file)) {
    return absl::FailedPreconditionError("in-cluster config: " + c.tls.ca_file + " is missing");
  }
  c.token_file = paths.dir + "/token";
  if (!fs::exists(c.token_file)) {
    return absl::FailedPreconditionError("in-cluster config: " + c.token_file + " is missing");
  }
  if (auto ns = fsutil::ReadFile(paths.dir + "/namespace"); ns.ok() && !Trim(*ns).empty()) {
    c.default_namespace = Trim(*ns);
  }
  c.origin = "in-cluster";
  return c;
}

absl::StatusOr<Config> LoadKubeconfig(const std::string& path, const std::string& context) {
  const std::string where = "kubeconfig " + path;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(where + " cannot be read");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(where + " is not valid YAML: " + e.what());
  }
  try {
    if (!root.IsMap()) return absl::InvalidArgumentError(where + " is not a kubeconfig (no map)");
    const std::string ctx_name = context.empty() ? Str(root, "current-context") : context;
    if (ctx_name.empty()) {
      return absl::InvalidArgumentError(where + ": no context given and no current-context");
    }
    const YAML::Node ctx = FindNamed(root, "contexts", "context", ctx_name);
    if (!ctx.IsDefined()) {
      return absl::InvalidArgumentError(where + ": context \"" + ctx_name + "\" is not there");
    }
    const std::string cluster_name = Str(ctx, "cluster");
    const YAML::Node cluster = FindNamed(root, "clusters", "cluster", cluster_name);
    if (!cluster.IsDefined()) {
      return absl::InvalidArgumentError(where + ": context \"" + ctx_name + "\" names cluster \"" +
                                        cluster_name + "\", which is not there");
    }
    const fs::path dir = fs::path(path).parent_path();
    auto resolve = [&](const std::string& p) {
      if (p.empty() || fs::path(p).is_absolute()) return p;
      return (dir / p).lexically_normal().string();
    };

    Config c;
    c.origin = where + ", context " + ctx_name;
    const std::string cwhere = where + ": cluster \"" + cluster_name + "\"";
    c.server = Str(cluster, "server");
    if (c.server.empty()) return absl::InvalidArgumentError(cwhere + " has no server");
    if (cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>()) {
      return absl::InvalidArgumentError(
          cwhere +
          ": insecure-skip-tls-verify is refused (wisp always verifies the apiserver); give "
          "certificate-authority or certificate-authority-data");
    }
    if (const std::string d = Str(cluster, "certificate-authority-data"); !d.empty()) {
      WISP_ASSIGN_OR_RETURN(c.tls.ca_pem, DecodeData(d, cwhere + ": certificate-authority-data"));
    } else {
      c.tls.ca_file = resolve(Str(cluster, "certificate-authority"));
    }
    c.tls.server_name = Str(cluster, "tls-server-name");

    if (const std::string ns = Str(ctx, "namespace"); !ns.empty()) c.default_namespace = ns;
    const std::string user_name = Str(ctx, "user");
    if (user_name.empty()) return c;  // no credentials: anonymous
    const YAML::Node user = FindNamed(root, "users", "user", user_name);
    if (!user.IsDefined()) {
      return absl::InvalidArgumentError(where + ": context \"" + ctx_name + "\" names user \"" +
                                        user_name + "\", which is not there");
    }
    const std::string uwhere = where + ": user \"" + user_name + "\"";
    if (user["exec"]) {
      return absl::InvalidArgumentError(
          uwhere +
          " authenticates with an exec credential plugin, which wisp does not run; give "
          "it a token, tokenFile or client certificate");
    }
    if (user["auth-provider"]) {
      return absl::InvalidArgumentError(
          uwhere +
          " authenticates with an auth-provider, which wisp does not support; give it "
          "a token, tokenFile or client certificate");
    }
    if (user["username"] || user["password"]) {
      return absl::InvalidArgumentError(uwhere +
                                        ": basic authentication (username/password) is refused");
    }
    if (const std::string d = Str(user, "client-certificate-data"); !d.empty()) {
      WISP_ASSIGN_OR_RETURN(c.tls.cert_pem, DecodeData(d, uwhere + ": client-certificate-data"));
    } else {
      c.tls.cert_file = resolve(Str(user, "client-certificate"));
    }
    if (const std::string d = Str(user, "client-key-data"); !d.empty()) {
      WISP_ASSIGN_OR_RETURN(c.tls.key_pem, DecodeData(d, uwhere + ": client-key-data"));
    } else {
      c.tls.key_file = resolve(Str(user, "client-key"));
    }
    const bool has_cert = !c.tls.cert_pem.empty() || !c.tls.cert_file.empty();
    const bool has_key = !c.tls.key_pem.empty() || !c.tls.key_file.empty();
    if (has_cert != has_key) {
      return absl::InvalidArgumentError(uwhere + ": client-certificate and client-key go together");
    }
    c.token = Str(user, "token");
    c.token_file = resolve(Str(user, "tokenFile"));
    return c;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(where + ": " + e.what());
  }
}

absl::StatusOr<Config> LoadFromEnvironment() {
  if (const std::string list = Env("KUBECONFIG"); !list.empty()) {
    const std::string first = list.substr(0, list.find(':'));
    WISP_ASSIGN_OR_RETURN(Config c, LoadKubeconfig(first));
    if (first.size() != list.size()) {
      c.origin += " (first file of KUBECONFIG; wisp does not merge the others)";
      SPDLOG_LOGGER_INFO(log::Get("kube"),
                         "KUBECONFIG lists several files; wisp reads only the first, {}", first);
    }
    return c;
  }
  if (!Env("KUBERNETES_SERVICE_HOST").empty()) return LoadInCluster();
  const std::string home = Env("HOME");
  if (home.empty()) {
    return absl::FailedPreconditionError(
        "no Kubernetes config: set KUBECONFIG, run in a pod, or set HOME for ~/.kube/config");
  }
  return LoadKubeconfig(home + "/.kube/config");
}

TokenSource::TokenSource(std::string token, std::string token_file, const Clock* clock,
                         std::chrono::seconds refresh)
    : static_(std::move(token)),
      file_(std::move(token_file)),
      clock_(clock != nullptr ? clock : &SystemClock::Instance()),
      refresh_(refresh) {}

absl::StatusOr<std::string> TokenSource::Token() {
  if (file_.empty()) return static_;
  std::lock_guard lock(mu_);
  const auto now = clock_->Steady();
  if (loaded_ && now - read_at_ < refresh_) return token_;
  auto bytes = fsutil::ReadFile(file_);
  read_at_ = now;
  if (!bytes.ok()) {
    // Keep the last good token: kubelet swaps the file with a rename, a miss is transient.
    if (loaded_) return token_;
    if (!static_.empty()) return static_;
    return absl::UnavailableError("the bearer token file " + file_ + " cannot be read");
  }
  token_ = Trim(*std::move(bytes));
  loaded_ = true;
  return token_;
}

void TokenSource::Invalidate() {
  std::lock_guard lock(mu_);
  read_at_ = {};
  if (loaded_) read_at_ = clock_->Steady() - refresh_;
}

}  // namespace wisp::kube
