// policy_eval_bench REVIEW_JSON POLICY_YAML [--benchmark_...]: the CPU one admission costs in the
// gateway's and wisp-policy's own code, without HTTP, TLS or NATS: the gateway's review parse, and
// the policy's parse, rules and answer encoding on the bench's pod (make_body.py). run.sh measures
// the whole path; this says which part of it a change to the rules moved.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <optional>
#include <string>

#include "admission/review_call.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/policy/rules.hpp"

namespace {

std::string g_review;
wisp::policy::Policy g_policy;

wisp::v1::AdmissionCall Call() {
  auto rc = wisp::gateway::admission::ParseReviewCall(g_review, "1.30");
  if (!rc.ok()) {
    std::fprintf(stderr, "review: %s\n", std::string(rc.status().message()).c_str());
    std::exit(2);
  }
  return rc->call;
}

absl::StatusOr<std::optional<std::string>> NoRecord(std::string_view, std::string_view) {
  return std::optional<std::string>();
}

void GatewayParseReview(benchmark::State& state) {
  for (auto _ : state) {
    auto rc = wisp::gateway::admission::ParseReviewCall(g_review, "1.30");
    benchmark::DoNotOptimize(rc);
  }
}
BENCHMARK(GatewayParseReview);

using PodTree = wisp::policy::AdmissionInput::PodTree;

// The bus message to the rules' input: the pod's facts only, as wisp-policy reads a pod (kDefer),
// or its nlohmann tree as well (kParse: what the tree costs, for a rule that would need it).
void PolicyParseObject(benchmark::State& state, PodTree tree) {
  const std::string wire = Call().SerializeAsString();
  for (auto _ : state) {
    wisp::v1::AdmissionCall call;
    call.ParseFromString(wire);
    auto in = wisp::policy::AdmissionInput::FromCall(std::move(call), 0, tree);
    benchmark::DoNotOptimize(in);
  }
}
BENCHMARK_CAPTURE(PolicyParseObject, facts, PodTree::kDefer);
BENCHMARK_CAPTURE(PolicyParseObject, facts_and_tree, PodTree::kParse);

// The verdict to the reply body (the patch JSON, warnings, annotations). The rules'
// own share is PolicyWholeRequest less this and PolicyParseObject.
void PolicyEncodeVerdict(benchmark::State& state) {
  auto in = wisp::policy::AdmissionInput::FromCall(Call());
  const wisp::policy::Verdict v = wisp::policy::EvaluateMutate(*std::move(in), g_policy, NoRecord);
  std::string reply;
  for (auto _ : state) {
    wisp::policy::ToProto(v).SerializeToString(&reply);
    benchmark::DoNotOptimize(reply);
  }
}
BENCHMARK(PolicyEncodeVerdict);

// What wisp-policy does per request between the bus message and the reply body, on the mutate
// path or the validate path.
void PolicyWhole(benchmark::State& state, bool mutate) {
  const std::string wire = Call().SerializeAsString();
  const wisp::policy::RecordLookup lookup = NoRecord;
  std::string reply;
  for (auto _ : state) {
    wisp::v1::AdmissionCall call;
    call.ParseFromString(wire);
    auto in = wisp::policy::AdmissionInput::FromCall(std::move(call), 0, PodTree::kDefer);
    auto v = mutate ? wisp::policy::EvaluateMutate(*std::move(in), g_policy, lookup)
                    : wisp::policy::EvaluateValidate(*in, g_policy, lookup);
    wisp::policy::ToProto(v).SerializeToString(&reply);
    benchmark::DoNotOptimize(reply);
  }
}

// The mutate request for the bench's pod.
void PolicyWholeRequest(benchmark::State& state) { PolicyWhole(state, true); }
BENCHMARK(PolicyWholeRequest);

// The same pod on the validate path, as wisp's validating webhook sends it (rule f reads the
// pod's facts: its projected token audiences and csi.wisp.dev volumes).
void PolicyWholeValidate(benchmark::State& state) { PolicyWhole(state, false); }
BENCHMARK(PolicyWholeValidate);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: policy_eval_bench REVIEW_JSON POLICY_YAML [--benchmark_...]\n"
                 "  REVIEW_JSON: an AdmissionReview, e.g. bench/admission/make_body.py's output\n"
                 "  POLICY_YAML: a wisp-policy file, e.g. deploy/local/policy.yaml\n");
    return 2;
  }
  auto review = wisp::fsutil::ReadFile(argv[1]);
  if (!review.ok()) {
    std::fprintf(stderr, "%s\n", std::string(review.status().message()).c_str());
    return 2;
  }
  g_review = *std::move(review);
  auto policy = wisp::policy::LoadPolicyFile(argv[2]);
  if (!policy.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[2], std::string(policy.status().message()).c_str());
    return 2;
  }
  g_policy = *policy;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
