#include "keys.hpp"

#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"

namespace wisp::wispctl {
namespace {

constexpr const char* kUsage = R"(NAME
    wispctl keys - list, rotate, taint or revoke wisp-token's signing keys

SYNOPSIS
    wispctl keys list [--json]
    wispctl keys rotate [--algorithm RS256|ES256] [--json]
    wispctl keys taint KID [--json]
    wispctl keys revoke KID [--json]

DESCRIPTION
    Each algorithm has one active key (it signs) and at most one next key, published in the JWKS
    before it signs (wisp-token --key-publish-ahead) so relying parties that cache the JWKS know
    it first. A retired key stays in the JWKS until every token it signed has expired.

    list     every published key: state (active, next, retired), tainted, and when it was made,
             began signing and leaves the JWKS.
    rotate   the next key signs now, for every algorithm or --algorithm's. When none was
             published, wisp-token makes one, and relying parties that cached the JWKS may refuse
             its tokens until they fetch it again. The old key retires as on schedule.
    taint    KID stops signing now (the next key takes over). It stays in the JWKS until every
             token it signed has expired, so they keep verifying; no new token carries it.
    revoke   KID leaves the JWKS now: the tokens it signed stop verifying at wisp at once, and at
             relying parties when they refetch the JWKS (the gateway says max-age 300 s). For a
             key that leaked.

    Only wispctl's NATS user may ask (wisp.v1.token.key_admin). `wispctl keys <verb> --help`
    lists every option.
)";

std::string UtcTime(int64_t unix_seconds) {
  if (unix_seconds == 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int Fail(const std::string& verb, const absl::Status& st) {
  std::cerr << "wispctl keys " << verb << ": " << st.message() << "\n";
  return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

absl::StatusOr<v1::KeyAdminRequest> KeyAdminRequestFor(const std::string& verb,
                                                       const std::vector<std::string>& positional,
                                                       const std::string& algorithm) {
  v1::KeyAdminRequest req;
  const bool wants_kid = verb == "taint" || verb == "revoke";
  if (verb == "list") {
    req.set_action(v1::KeyAdminRequest::LIST);
  } else if (verb == "rotate") {
    req.set_action(v1::KeyAdminRequest::ROTATE);
  } else if (verb == "taint") {
    req.set_action(v1::KeyAdminRequest::TAINT);
  } else if (verb == "revoke") {
    req.set_action(v1::KeyAdminRequest::REVOKE);
  } else {
    return absl::InvalidArgumentError("unknown verb \"" + verb +
                                      "\" (list | rotate | taint | revoke)");
  }
  if (!algorithm.empty() && verb != "rotate") {
    return absl::InvalidArgumentError("algorithm: only rotate takes it");
  }
  if (!algorithm.empty() && algorithm != "RS256" && algorithm != "ES256") {
    return absl::InvalidArgumentError("algorithm: \"" + algorithm + "\" is not RS256 or ES256");
  }
  req.set_algorithm(algorithm);
  if (wants_kid) {
    if (positional.empty()) {
      return absl::InvalidArgumentError("KID: required (wispctl keys list shows the kids)");
    }
    if (positional.size() > 1) {
      return absl::InvalidArgumentError("KID: one key at a time (got " +
                                        std::to_string(positional.size()) + ")");
    }
    req.set_kid(positional[0]);
  } else if (!positional.empty()) {
    return absl::InvalidArgumentError("unexpected argument \"" + positional[0] + "\"");
  }
  return req;
}

std::string FormatKeys(const v1::KeyAdminResponse& resp) {
  std::ostringstream out;
  size_t kid_width = 3;
  for (const auto& k : resp.keys()) kid_width = std::max(kid_width, k.kid().size());
  out << std::left << std::setw(static_cast<int>(kid_width) + 2) << "KID" << std::setw(7) << "ALG"
      << std::setw(9) << "STATE" << std::setw(9) << "TAINTED" << std::setw(22) << "CREATED"
      << std::setw(22) << "SIGNED FROM" << std::setw(22) << "RETIRED"
      << "IN JWKS UNTIL\n";
  for (const auto& k : resp.keys()) {
    std::string until = "-";
    if (k.state() == "retired") until = UtcTime(k.published_until_unix());
    out << std::setw(static_cast<int>(kid_width) + 2) << k.kid() << std::setw(7) << k.algorithm()
        << std::setw(9) << k.state() << std::setw(9) << (k.tainted() ? "yes" : "-") << std::setw(22)
        << UtcTime(k.created_unix()) << std::setw(22) << UtcTime(k.activated_unix())
        << std::setw(22) << UtcTime(k.retired_unix()) << until << "\n";
  }
  out << resp.keys_size() << " keys published; each key signs for "
      << resp.rotation_period_seconds() << " s, and the next one is published "
      << resp.publish_ahead_seconds() << " s before it signs\n";
  return out.str();
}

std::string FormatKeysJson(const v1::KeyAdminResponse& resp) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& k : resp.keys()) {
    keys.push_back({{"kid", k.kid()},
                    {"algorithm", k.algorithm()},
                    {"state", k.state()},
                    {"tainted", k.tainted()},
                    {"created_unix", k.created_unix()},
                    {"activated_unix", k.activated_unix()},
                    {"retired_unix", k.retired_unix()},
                    {"published_until_unix", k.published_until_unix()}});
  }
  nlohmann::json doc = {{"keys", std::move(keys)},
                        {"rotation_period_seconds", resp.rotation_period_seconds()},
                        {"publish_ahead_seconds", resp.publish_ahead_seconds()}};
  if (!resp.message().empty()) doc["message"] = resp.message();
  return doc.dump(2) + "\n";
}

int RunKeys(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string verb = args[0];
  if (verb != "list" && verb != "rotate" && verb != "taint" && verb != "revoke") {
    std::cerr << "wispctl keys: unknown verb \"" << verb << "\" (list | rotate | taint | revoke)\n";
    return 2;
  }
  Connection conn;
  std::string algorithm;
  bool json = false;
  const std::string command = "wispctl keys " + verb;
  config::Flags flags(command, verb == "list"     ? "list wisp-token's signing keys"
                               : verb == "rotate" ? "make the next signing key sign now"
                               : verb == "taint"
                                   ? "stop a key signing; it verifies until its tokens expire"
                                   : "remove a key from the JWKS now");
  AddConnectionFlags(flags, conn);
  if (verb == "rotate") {
    flags.String("algorithm", &algorithm, "RS256 or ES256 only (default: every algorithm).");
  }
  flags.Bool("json", &json, "Print the answer as JSON.");
  int code = 0;
  if (!ParseCommand(flags, command, std::vector<std::string>(args.begin() + 1, args.end()), code)) {
    return code;
  }
  auto req = KeyAdminRequestFor(verb, flags.Positional(), algorithm);
  if (!req.ok()) return Fail(verb, req.status());
  auto bus = Connect(conn);
  if (!bus.ok()) return Fail(verb, bus.status());
  auto resp =
      bus::Call<v1::KeyAdminResponse>(**bus, bus::subjects::kTokenKeyAdmin, *req, conn.timeout);
  if (!resp.ok()) {
    // A refusal (unknown kid) is the operation failing, not bad usage of wispctl.
    std::cerr << command << ": " << resp.status().message() << "\n";
    return 1;
  }
  if (json) {
    std::cout << FormatKeysJson(*resp);
  } else {
    if (!resp->message().empty()) std::cout << resp->message() << "\n\n";
    std::cout << FormatKeys(*resp);
  }
  return 0;
}

}  // namespace wisp::wispctl
