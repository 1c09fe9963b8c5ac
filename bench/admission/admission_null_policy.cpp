// admission_null_policy: a stand-in for wisp-policy that answers every wisp.v1.policy.mutate with
// one verdict, computed at start by the real rules from REVIEW (run.sh's review) and POLICY. With
// it, run.sh's "floor" phase measures the admission path (HTTPS, the gateway, NATS and a serving
// process) without wisp-policy's per-request work: what no change to the rules can go below.
#include <string>

#include "admission/review_call.hpp"
#include "wisp/policy/rules.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/runtime/runtime.hpp"

namespace {

absl::StatusOr<std::string> Verdict(const std::string& review_file,
                                    const std::string& policy_file) {
  auto body = wisp::fsutil::ReadFile(review_file);
  if (!body.ok()) return absl::NotFoundError("review: " + std::string(body.status().message()));
  auto policy = wisp::policy::LoadPolicyFile(policy_file);
  if (!policy.ok()) {
    return absl::InvalidArgumentError("policy-file: " + std::string(policy.status().message()));
  }
  auto rc = wisp::gateway::admission::ParseReviewCall(*body, "1.30");
  if (!rc.ok()) return absl::InvalidArgumentError("review: " + std::string(rc.status().message()));
  auto in = wisp::policy::AdmissionInput::FromCall(std::move(rc->call));
  if (!in.ok()) return absl::InvalidArgumentError("review: " + std::string(in.status().message()));
  const wisp::policy::RecordLookup none =
      [](std::string_view, std::string_view) -> absl::StatusOr<std::optional<std::string>> {
    return std::optional<std::string>();
  };
  return wisp::policy::ToProto(wisp::policy::EvaluateMutate(*std::move(in), *policy, none))
      .SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace wisp;
  runtime::CommonSettings common{.metrics_address = "127.0.0.1:0"};
  std::string review_file, policy_file;
  config::Flags flags("admission_null_policy",
                      "answers wisp.v1.policy.mutate with one precomputed verdict, for benchmarks");
  runtime::AddCommonFlags(flags, common);
  flags.String("review", &review_file, "AdmissionReview JSON whose verdict is the answer.");
  flags.String("policy-file", &policy_file, "wisp-policy rules file the verdict is computed with.");
  int64_t serve_loops = 1;
  flags.Int("serve-loops", &serve_loops,
            "As wisp-policy's: serve on this many event-loop connections of their own (0: the "
            "shared connection with --serve-threads threads).");
  flags.ParseOrExit(argc, argv);
  auto verdict = Verdict(review_file, policy_file);
  if (!verdict.ok()) return runtime::Fail("admission_null_policy", verdict.status());
  auto process = runtime::Process::Start("admission-null-policy", common);
  if (!process.ok()) return runtime::Fail("admission_null_policy", process.status());
  auto micro = (*process)->RegisterService("one precomputed admission verdict");
  if (!micro.ok()) return runtime::Fail("admission_null_policy", micro.status());
  auto st = (*micro)->AddEndpoint("mutate", bus::subjects::kPolicyMutate, bus::queues::kPolicy,
                                  [&](const bus::Request&) { return bus::Reply::Ok(*verdict); },
                                  {.loop_connections = static_cast<int>(serve_loops)});
  if (!st.ok()) return runtime::Fail("admission_null_policy", st);
  (*process)->WaitForSignal();
  return (*process)->Shutdown();
}
