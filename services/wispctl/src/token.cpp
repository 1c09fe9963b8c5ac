#include "token.hpp"

#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::wispctl {
namespace {

constexpr const char* kUsage = R"(NAME
    wispctl token - issue, verify or exchange a wisp token

SYNOPSIS
    wispctl token issue --namespace NS --service-account SA [--audience A,B] [--expiration-seconds N]
                        [--algorithm RS256|ES256] [--pod-name P --pod-uid U]
                        [--pod-proof-file F] [--json]
    wispctl token verify (--token-file F | stdin | WISP_TOKEN) [--audience A,B]
                         [--jwks-file F --issuer URL]
    wispctl token exchange (--token-file F | stdin | WISP_TOKEN) --audience A [--scope S] [--json]

    A token is never taken on the command line (`ps` shows it to every user).

    `wispctl token <verb> --help` lists every option.
)";

absl::StatusOr<std::string> ReadToken(const std::string& token, const std::string& file) {
  std::string text = token;
  if (text.empty()) {
    auto input = ReadInput(file);
    if (!input.ok()) {
      return absl::InvalidArgumentError("token-file: cannot read " +
                                        std::string(input.status().message()));
    }
    text = *std::move(input);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (text.empty()) return absl::InvalidArgumentError("token: empty");
  return text;
}

int Fail(const std::string& what, const absl::Status& st) {
  std::cerr << "wispctl token " << what << ": " << st.message() << "\n";
  return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Issue(const std::vector<std::string>& args) {
  Connection conn;
  std::string ns, sa, sa_uid, pod, pod_uid, node, audiences, algorithm, proof_file;
  int64_t expiration = 0;
  bool json = false;
  config::Flags flags("wispctl token issue", "issue a Kubernetes-shaped service-account token");
  AddConnectionFlags(flags, conn);
  flags.String("namespace", &ns, "Namespace of the service account.");
  flags.String("service-account", &sa, "Service account name.");
  flags.String("service-account-uid", &sa_uid, "Service account uid.");
  flags.String("pod-name", &pod, "Bind the token to this pod.");
  flags.String("pod-uid", &pod_uid, "uid of the bound pod.");
  flags.String("node-name", &node, "Node of the bound pod.");
  flags.String("audience", &audiences, "Comma-separated audiences (default: the policy's).");
  flags.Int("expiration-seconds", &expiration, "Lifetime (600 .. 2^32; 0 = 3600).");
  flags.String("algorithm", &algorithm, "RS256 or ES256 (default: the service's).");
  flags.String("pod-proof-file", &proof_file,
               "File holding the pod's Kubernetes service-account token (audience: wisp-token's "
               "issue.podProofAudience), needed when its policy sets issue.requirePodProof.");
  flags.Bool("json", &json, "Print the whole IssueResponse as JSON.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl token issue", args, code)) return code;
  std::string proof;
  if (!proof_file.empty()) {
    auto read = ReadToken("", proof_file);
    if (!read.ok()) {
      return Fail("issue", absl::InvalidArgumentError("pod-proof-file: " +
                                                      std::string(read.status().message())));
    }
    proof = *std::move(read);
  }
  v1::IssueRequest req;
  req.mutable_subject()->set_namespace_(ns);
  req.mutable_subject()->set_service_account(sa);
  req.mutable_subject()->set_service_account_uid(sa_uid);
  req.mutable_subject()->set_pod_name(pod);
  req.mutable_subject()->set_pod_uid(pod_uid);
  req.mutable_subject()->set_node_name(node);
  for (const auto& a : SplitList(audiences)) req.add_audiences(a);
  req.set_expiration_seconds(expiration);
  req.set_algorithm(algorithm);
  req.set_pod_proof(proof);
  auto bus = Connect(conn);
  if (!bus.ok()) return Fail("issue", bus.status());
  auto resp = bus::Call<v1::IssueResponse>(**bus, bus::subjects::kTokenIssue, req, conn.timeout);
  if (!resp.ok()) return Fail("issue", resp.status());
  if (json) {
    std::cout << nlohmann::json{{"token", resp->token()},
                                {"expiration_unix", resp->expiration_unix()},
                                {"issued_at_unix", resp->issued_at_unix()},
                                {"key_id", resp->key_id()}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << resp->token() << "\n";
  }
  return 0;
}

int Verify(const std::vector<std::string>& args) {
  Connection conn;
  std::string token, file, audiences, jwks_file, issuer;
  config::Flags flags("wispctl token verify",
                      "verify a token with wisp-token's review, or offline against a JWKS file");
  AddConnectionFlags(flags, conn);
  flags.String("token", &token, "The token (else --token-file, else stdin).");
  flags.Secret("--token-file FILE, stdin, or the environment variable WISP_TOKEN");
  flags.String("token-file", &file, "File holding the token ('-' = stdin).");
  flags.String("audience", &audiences, "Comma-separated audiences; the token must carry one.");
  flags.String("jwks-file", &jwks_file, "Verify offline against this JWKS instead of the bus.");
  flags.String("issuer", &issuer, "With --jwks-file: the iss the token must carry.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl token verify", args, code)) return code;
  auto text = ReadToken(token, file);
  if (!text.ok()) return Fail("verify", text.status());
  nlohmann::json out;
  if (!jwks_file.empty()) {
    auto jwks = fsutil::ReadFile(jwks_file);
    if (!jwks.ok()) {
      return Fail("verify", absl::InvalidArgumentError("jwks-file: cannot read " +
                                                       std::string(jwks.status().message())));
    }
    auto keys = jwt::KeySet::FromJwks(*jwks);
    if (!keys.ok()) return Fail("verify", absl::InvalidArgumentError(keys.status().message()));
    jwt::VerifyOptions opts;
    opts.issuer = issuer;
    opts.audiences = SplitList(audiences);
    opts.now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    opts.leeway = std::chrono::seconds(60);
    auto v = jwt::Verify(*text, *keys, opts);
    if (!v.ok()) {
      std::cout << nlohmann::json{{"authenticated", false},
                                  {"error", std::string(v.status().message())}}
                       .dump(2)
                << "\n";
      return 1;
    }
    out = {{"authenticated", true}, {"key_id", v->kid}, {"claims", v->claims}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  v1::ReviewRequest req;
  req.set_token(*text);
  for (const auto& a : SplitList(audiences)) req.add_audiences(a);
  auto bus = Connect(conn);
  if (!bus.ok()) return Fail("verify", bus.status());
  auto resp = bus::Call<v1::ReviewResponse>(**bus, bus::subjects::kTokenReview, req, conn.timeout);
  if (!resp.ok()) return Fail("verify", resp.status());
  out = {{"authenticated", resp->authenticated()}};
  if (!resp->authenticated()) {
    out["error"] = resp->error();
  } else {
    out["issuer"] = resp->issuer();
    out["key_id"] = resp->key_id();
    out["audiences"] = std::vector<std::string>(resp->audiences().begin(), resp->audiences().end());
    out["expiration_unix"] = resp->expiration_unix();
    out["subject"] = {{"namespace", resp->subject().namespace_()},
                      {"service_account", resp->subject().service_account()},
                      {"pod_name", resp->subject().pod_name()},
                      {"pod_uid", resp->subject().pod_uid()}};
  }
  std::cout << out.dump(2) << "\n";
  return resp->authenticated() ? 0 : 1;
}

int Exchange(const std::vector<std::string>& args) {
  Connection conn;
  std::string token, file, audience, scope;
  bool json = false;
  config::Flags flags("wispctl token exchange", "RFC 8693 exchange of a subject token");
  AddConnectionFlags(flags, conn);
  flags.String("token", &token, "The subject token (else --token-file, else stdin).");
  flags.Secret("--token-file FILE, stdin, or the environment variable WISP_TOKEN");
  flags.String("token-file", &file, "File holding the subject token ('-' = stdin).");
  flags.String("audience", &audience, "The audience of the access token.");
  flags.String("scope", &scope, "Space-separated scopes.");
  flags.Bool("json", &json, "Print the whole answer as JSON.");
  int code = 0;
  if (!ParseCommand(flags, "wispctl token exchange", args, code)) return code;
  auto text = ReadToken(token, file);
  if (!text.ok()) return Fail("exchange", text.status());
  v1::ExchangeRequest req;
  req.set_grant_type("urn:ietf:params:oauth:grant-type:token-exchange");
  req.set_subject_token(*text);
  req.set_subject_token_type("urn:ietf:params:oauth:token-type:jwt");
  req.set_requested_token_type("urn:ietf:params:oauth:token-type:access_token");
  req.set_audience(audience);
  req.set_scope(scope);
  auto bus = Connect(conn);
  if (!bus.ok()) return Fail("exchange", bus.status());
  auto resp =
      bus::Call<v1::ExchangeResponse>(**bus, bus::subjects::kTokenExchange, req, conn.timeout);
  if (!resp.ok()) return Fail("exchange", resp.status());
  if (!resp->error().empty()) {
    std::cerr << "wispctl token exchange: " << resp->error() << ": " << resp->error_description()
              << "\n";
    return 1;
  }
  if (json) {
    std::cout << nlohmann::json{{"access_token", resp->access_token()},
                                {"issued_token_type", resp->issued_token_type()},
                                {"token_type", resp->token_type()},
                                {"expires_in", resp->expires_in()},
                                {"scope", resp->scope()}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << resp->access_token() << "\n";
  }
  return 0;
}

}  // namespace

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t b = item.find_first_not_of(' ');
    const size_t e = item.find_last_not_of(' ');
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

int RunToken(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "issue") return Issue(rest);
  if (args[0] == "verify") return Verify(rest);
  if (args[0] == "exchange") return Exchange(rest);
  std::cerr << "wispctl token: unknown verb \"" << args[0] << "\" (issue | verify | exchange)\n";
  return 2;
}

}  // namespace wisp::wispctl
