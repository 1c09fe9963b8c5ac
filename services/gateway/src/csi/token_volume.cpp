#include "csi/token_volume.hpp"

#include <algorithm>
#include <charconv>
#include <ctime>

#include <nlohmann/json.hpp>

#include "csi/strip_secrets.hpp"
#include "wisp/fsutil/atomic_writer.hpp"

namespace wisp::gateway::csi {
namespace {

std::string Get(const VolumeContext& context, const std::string& key) {
  auto it = context.find(key);
  return it == context.end() ? std::string() : it->second;
}

absl::Status Bad(const std::string& attribute, const std::string& why) {
  return absl::InvalidArgumentError("volume_context[" + attribute + "]: " + why);
}

bool IsHttpsUrl(const std::string& s) {
  return s.rfind("https://", 0) == 0 && s.size() > 8 &&
         s.find_first_of(" \t\r\n\"\\") == std::string::npos;
}

}  // namespace

absl::StatusOr<std::string> GcpCredentialConfig(const VolumeContext& context) {
  const std::string audience = Get(context, "gcpAudience");
  const std::string token_url = Get(context, "gcpTokenUrl");
  const std::string token_path = Get(context, "gcpTokenPath");
  const std::string impersonation = Get(context, "gcpServiceAccountImpersonationUrl");
  if (audience.rfind("//iam.googleapis.com/", 0) != 0) {
    return Bad("gcpAudience", "must be a workload identity provider, //iam.googleapis.com/...");
  }
  if (!IsHttpsUrl(token_url)) return Bad("gcpTokenUrl", "must be an https URL");
  if (token_path.empty() || token_path.front() != '/') {
    return Bad("gcpTokenPath", "must be the token's absolute path inside the container");
  }
  if (!impersonation.empty() && !IsHttpsUrl(impersonation)) {
    return Bad("gcpServiceAccountImpersonationUrl", "must be an https URL");
  }
  // The format of `gcloud iam workload-identity-pools create-cred-config`: an external account
  // whose subject token is the file's text.
  nlohmann::ordered_json config = {
      {"universe_domain", "googleapis.com"},
      {"type", "external_account"},
      {"audience", audience},
      {"subject_token_type", "urn:ietf:params:oauth:token-type:jwt"},
      {"token_url", token_url},
      {"credential_source", {{"file", token_path}, {"format", {{"type", "text"}}}}}};
  if (!impersonation.empty()) config["service_account_impersonation_url"] = impersonation;
  return config.dump(2) + "\n";
}

bool IsEphemeral(const VolumeContext& context) { return Get(context, kEphemeralKey) == "true"; }

absl::StatusOr<TokenVolumeSpec> ParseTokenVolume(const VolumeContext& context,
                                                 int64_t min_expiration_seconds) {
  TokenVolumeSpec spec;
  spec.audience = Get(context, "audience");

  if (auto it = context.find("expirationSeconds"); it != context.end()) {
    const std::string& text = it->second;
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      return Bad("expirationSeconds", "must be an integer number of seconds, got \"" + text + "\"");
    }
    if (value < min_expiration_seconds) {
      return Bad("expirationSeconds", min_expiration_seconds == kMinExpirationSeconds
                                          ? "may not specify a duration less than 10 minutes"
                                          : "may not specify a duration less than " +
                                                std::to_string(min_expiration_seconds) + "s");
    }
    if (value > kMaxExpirationSeconds) {
      return Bad("expirationSeconds", "may not specify a duration larger than 2^32 seconds");
    }
    spec.expiration_seconds = value;
  }

  if (auto it = context.find("path"); it != context.end()) spec.path = it->second;
  if (absl::Status st = fsutil::ValidatePath(spec.path); !st.ok()) {
    return Bad("path", std::string(st.message()));
  }
  if (spec.path.find('/') != std::string::npos) {
    // One file at the top of the volume keeps the mount simple to share (virtiofs, subPath).
    return Bad("path", "must be a file name without '/': " + spec.path);
  }

  if (auto it = context.find("fileMode"); it != context.end()) {
    const std::string& text = it->second;
    uint32_t mode = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || mode > 0777) {
      return Bad("fileMode", "must be an octal mode between 0000 and 0777, got \"" + text + "\"");
    }
    spec.file_mode = mode;
  }

  for (const auto& [key, out] :
       {std::pair{"fileOwner", &spec.file_uid}, std::pair{"fileGroup", &spec.file_gid}}) {
    auto it = context.find(key);
    if (it == context.end()) continue;
    const std::string& text = it->second;
    uint32_t id = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
    // 2^32-1 is (uid_t)-1, "no change" to chown.
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || id == UINT32_MAX) {
      return Bad(key, "must be a numeric id between 0 and 4294967294, got \"" + text + "\"");
    }
    *out = id;
  }

  if (auto it = context.find("gcpCredentialFile"); it != context.end()) {
    WISP_ASSIGN_OR_RETURN(std::string config, GcpCredentialConfig(context));
    const std::string& name = it->second;
    if (absl::Status st = fsutil::ValidatePath(name); !st.ok()) {
      return Bad("gcpCredentialFile", std::string(st.message()));
    }
    if (name.find('/') != std::string::npos || name == spec.path) {
      return Bad("gcpCredentialFile",
                 "must be a file name without '/', other than the token's: " + name);
    }
    spec.extra_files[name] = std::move(config);
  } else {
    for (const char* key :
         {"gcpAudience", "gcpTokenUrl", "gcpTokenPath", "gcpServiceAccountImpersonationUrl"}) {
      if (context.count(key) > 0) return Bad(key, "is set without gcpCredentialFile");
    }
  }

  const std::string source = Get(context, "tokenSource");
  if (source.empty() || source == "wisp") {
    spec.source = TokenSource::kWisp;
  } else if (source == "kubelet") {
    spec.source = TokenSource::kKubelet;
  } else {
    return Bad("tokenSource", "must be \"wisp\" or \"kubelet\", got \"" + source + "\"");
  }

  spec.subject.set_namespace_(Get(context, kPodNamespaceKey));
  spec.subject.set_service_account(Get(context, kServiceAccountNameKey));
  spec.subject.set_pod_name(Get(context, kPodNameKey));
  spec.subject.set_pod_uid(Get(context, kPodUidKey));
  if (spec.source == TokenSource::kWisp) {
    // A wisp token is bound to the pod: the kubelet must pass pod info (CSIDriver podInfoOnMount).
    for (const char* key : {kPodNamespaceKey, kServiceAccountNameKey, kPodNameKey, kPodUidKey}) {
      if (Get(context, key).empty()) {
        return Bad(key, "is required for tokenSource wisp (set podInfoOnMount on the CSIDriver)");
      }
    }
  }
  return spec;
}

absl::StatusOr<int64_t> ParseRfc3339(const std::string& text) {
  std::tm tm{};
  const char* rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return absl::InvalidArgumentError("not an RFC 3339 time: " + text);
  if (*rest == '.') {
    ++rest;
    while (*rest >= '0' && *rest <= '9') ++rest;
  }
  int64_t offset = 0;
  if (*rest == 'Z' || *rest == 'z') {
    ++rest;
  } else if (*rest == '+' || *rest == '-') {
    const int sign = *rest == '+' ? 1 : -1;
    int hh = 0, mm = 0;
    if (std::sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2) {
      return absl::InvalidArgumentError("not an RFC 3339 time: " + text);
    }
    offset = sign * (hh * 3600 + mm * 60);
    rest += 6;
  } else {
    return absl::InvalidArgumentError("not an RFC 3339 time: " + text);
  }
  if (*rest != '\0') return absl::InvalidArgumentError("not an RFC 3339 time: " + text);
  return static_cast<int64_t>(::timegm(&tm)) - offset;
}

absl::StatusOr<KubeletToken> KubeletTokenFor(const VolumeContext& context,
                                             const std::string& audience) {
  auto it = context.find(kServiceAccountTokensKey);
  if (it == context.end() || it->second.empty()) {
    return Bad(kServiceAccountTokensKey,
               "is required for tokenSource kubelet (set tokenRequests and requiresRepublish on "
               "the CSIDriver)");
  }
  // Never echo the value: it holds tokens.
  nlohmann::json doc = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Bad(kServiceAccountTokensKey, "is not a JSON object");
  }
  auto entry = doc.find(audience);
  if (entry == doc.end()) {
    return Bad(kServiceAccountTokensKey, "could not find token for \"" + audience + "\"");
  }
  if (!entry->is_object()) return Bad(kServiceAccountTokensKey, "entry is not an object");
  auto token = entry->find("token");
  auto expiry = entry->find("expirationTimestamp");
  if (token == entry->end() || !token->is_string() || token->get<std::string>().empty()) {
    return Bad(kServiceAccountTokensKey, "token for \"" + audience + "\" is missing or empty");
  }
  KubeletToken out;
  out.token = token->get<std::string>();
  if (expiry != entry->end() && expiry->is_string()) {
    auto when = ParseRfc3339(expiry->get<std::string>());
    if (!when.ok()) {
      return Bad(kServiceAccountTokensKey, "expirationTimestamp for \"" + audience +
                                               "\": " + std::string(when.status().message()));
    }
    out.expires_unix = *when;
  }
  return out;
}

int64_t NextRotationUnix(int64_t issued_unix, int64_t expires_unix,
                         std::chrono::milliseconds jitter) {
  const int64_t lifetime = std::max<int64_t>(expires_unix - issued_unix, 0);
  const int64_t at_80 = expires_unix - lifetime / 5;
  const int64_t at_24h = issued_unix + kMaxTokenAge.count();
  const int64_t jitter_s = (jitter.count() + 999) / 1000;
  return std::max(issued_unix, std::min(at_80, at_24h) - jitter_s);
}

std::chrono::milliseconds MaxJitterFor(int64_t lifetime_seconds) {
  const auto five_percent = std::chrono::milliseconds(lifetime_seconds * 50);
  return std::min<std::chrono::milliseconds>(kMaxJitter, five_percent);
}

}  // namespace wisp::gateway::csi
