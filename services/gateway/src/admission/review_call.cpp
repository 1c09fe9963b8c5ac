#include "admission/review_call.hpp"

#include <simdjson.h>

#include <optional>

#include "admission/admission_handler.hpp"
#include "wisp/k8s/admission_review.hpp"

namespace wisp::gateway::admission {
namespace {

namespace dom = simdjson::dom;

// Reads the members named in `fields` from `obj`; false (so: take the slow path) on a duplicate of
// one of them. Members not named are ignored, as ParseAdmissionReview ignores them.
template <size_t N>
bool Members(dom::object obj, const std::string_view (&names)[N],
             std::optional<dom::element> (&out)[N]) {
  for (dom::key_value_pair field : obj) {
    for (size_t i = 0; i < N; ++i) {
      if (field.key != names[i]) continue;
      if (out[i]) return false;
      out[i] = field.value;
    }
  }
  return true;
}

bool IsNull(const std::optional<dom::element>& e) { return !e || e->is_null(); }

// An optional string member: absent or null leaves `out` empty; false when it is another type.
bool OptString(const std::optional<dom::element>& e, std::string* out) {
  if (IsNull(e)) return true;
  std::string_view s;
  if (e->get_string().get(s)) return false;
  out->assign(s);
  return true;
}

bool ReqString(const std::optional<dom::element>& e, std::string* out) {
  return OptString(e, out) && !out->empty();
}

// An optional object member: absent or null is fine (`obj` stays unset); false when not an object.
bool OptObject(const std::optional<dom::element>& e, std::optional<dom::object>* obj) {
  if (IsNull(e)) return true;
  dom::object o;
  if (e->get_object().get(o)) return false;
  *obj = o;
  return true;
}

// request.object's and request.oldObject's text as the body has it, into the call. The DOM has
// validated the body and found neither member twice, so On-Demand's match is the one the DOM
// read. Copying the bytes costs less than writing the DOM back out with simdjson::minify (4.5% of
// the gateway's CPU at peak). False, with the call unchanged, when the text cannot be had.
bool CopyRawObjects(const simdjson::padded_string_view body, bool object, bool old_object,
                    v1::AdmissionCall& call) {
  namespace od = simdjson::ondemand;
  thread_local od::parser parser;
  od::document doc;
  od::object request;
  if (parser.iterate(body).get(doc) || doc["request"].get_object().get(request)) {
    return false;
  }
  std::string_view raw[2];
  for (auto field : request) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return false;
    const int which = key == "object" ? 0 : key == "oldObject" ? 1 : -1;
    if (which < 0 || !(which == 0 ? object : old_object)) continue;
    od::object value;
    if (field.value().get_object().get(value) || value.raw_json().get(raw[which])) return false;
  }
  if ((object && raw[0].empty()) || (old_object && raw[1].empty())) return false;
  if (object) call.set_object_json(std::string(raw[0]));
  if (old_object) call.set_old_object_json(std::string(raw[1]));
  return true;
}

// The fast path: nullopt whenever the body is not plainly a valid review.
std::optional<ReviewCall> Fast(std::string_view text, const std::string& server_version) {
  // One padded copy of the body for both parses (simdjson reads up to SIMDJSON_PADDING bytes past
  // the end): dom::parser::parse would otherwise allocate one of its own per request.
  thread_local std::string padded;
  padded.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  padded.assign(text);
  const simdjson::padded_string_view body(padded.data(), padded.size(), padded.capacity());
  thread_local dom::parser parser;  // keeps its buffers between requests
  dom::element doc;
  if (parser.parse(body.data(), body.size(), false).get(doc)) return std::nullopt;
  dom::object top;
  if (doc.get_object().get(top)) return std::nullopt;
  static constexpr std::string_view kTop[] = {"apiVersion", "kind", "request"};
  std::optional<dom::element> t[3];
  if (!Members(top, kTop, t)) return std::nullopt;
  ReviewCall out;
  std::string kind;
  if (!ReqString(t[0], &out.api_version) || !ReqString(t[1], &kind)) return std::nullopt;
  if (out.api_version != k8s::kAdmissionApiVersion &&
      out.api_version != k8s::kAdmissionApiVersionBeta) {
    return std::nullopt;
  }
  if (kind != k8s::kAdmissionReviewKind) return std::nullopt;
  std::optional<dom::object> req;
  if (!OptObject(t[2], &req) || !req) return std::nullopt;

  static constexpr std::string_view kReq[] = {"uid",       "kind",      "resource",  "subResource",
                                              "operation", "name",      "namespace", "userInfo",
                                              "object",    "oldObject", "dryRun"};
  std::optional<dom::element> r[11];
  if (!Members(*req, kReq, r)) return std::nullopt;
  v1::AdmissionCall& call = out.call;
  std::string s;
  if (!ReqString(r[0], &s)) return std::nullopt;
  call.set_uid(s);

  std::optional<dom::object> gvk;
  if (!OptObject(r[1], &gvk) || !gvk) return std::nullopt;
  static constexpr std::string_view kGvk[] = {"group", "version", "kind"};
  std::optional<dom::element> g[3];
  if (!Members(*gvk, kGvk, g)) return std::nullopt;
  std::string group, version, k;
  if (!OptString(g[0], &group) || !ReqString(g[1], &version) || !ReqString(g[2], &k)) {
    return std::nullopt;
  }
  call.mutable_kind()->set_group(group);
  call.mutable_kind()->set_version(version);
  call.mutable_kind()->set_kind(k);

  std::optional<dom::object> gvr;
  if (!OptObject(r[2], &gvr)) return std::nullopt;
  if (gvr) {
    static constexpr std::string_view kGvr[] = {"group", "version", "resource"};
    std::optional<dom::element> v[3];
    if (!Members(*gvr, kGvr, v)) return std::nullopt;
    std::string rg, rv, rr;
    if (!OptString(v[0], &rg) || !OptString(v[1], &rv) || !OptString(v[2], &rr)) {
      return std::nullopt;
    }
    call.mutable_resource()->set_group(rg);
    call.mutable_resource()->set_version(rv);
    call.mutable_resource()->set_kind(rr);
  } else {
    call.mutable_resource();  // ToAdmissionCall always sets it (empty)
  }
  std::string sub, op, name, ns;
  if (!OptString(r[3], &sub) || !ReqString(r[4], &op) || !OptString(r[5], &name) ||
      !OptString(r[6], &ns)) {
    return std::nullopt;
  }
  if (op != "CREATE" && op != "UPDATE" && op != "DELETE" && op != "CONNECT") return std::nullopt;
  call.set_sub_resource(sub);
  call.set_operation(op);
  call.set_name(name);
  call.set_namespace_(ns);

  std::optional<dom::object> ui;
  if (!OptObject(r[7], &ui)) return std::nullopt;
  auto* user = call.mutable_user();
  if (ui) {
    static constexpr std::string_view kUser[] = {"username", "uid", "groups"};
    std::optional<dom::element> u[3];
    if (!Members(*ui, kUser, u)) return std::nullopt;
    std::string username, uid;
    if (!OptString(u[0], &username) || !OptString(u[1], &uid)) return std::nullopt;
    user->set_username(username);
    user->set_uid(uid);
    if (!IsNull(u[2])) {
      dom::array groups;
      if (u[2]->get_array().get(groups)) return std::nullopt;
      for (dom::element e : groups) {
        std::string_view group_name;
        if (e.get_string().get(group_name)) return std::nullopt;
        user->add_groups(std::string(group_name));
      }
    }
  }
  std::optional<dom::object> object, old_object;
  if (!OptObject(r[8], &object) || !OptObject(r[9], &old_object)) return std::nullopt;
  if (!object && (op == "CREATE" || op == "UPDATE")) return std::nullopt;
  if (object && group.empty() && k == "Pod") {
    // Read from the DOM already built: the pod is not parsed a second time for this.
    for (const char* pointer : {"/spec/serviceAccountName", "/spec/serviceAccount"}) {
      std::string_view sa;
      if (!object->at_pointer(pointer).get_string().get(sa) && !sa.empty()) {
        out.service_account.assign(sa);
        break;
      }
    }
    if (out.service_account.empty()) out.service_account = "default";
  }
  if (!CopyRawObjects(body, object.has_value(), old_object.has_value(), call)) {
    if (object) call.set_object_json(simdjson::minify(*r[8]));
    if (old_object) call.set_old_object_json(simdjson::minify(*r[9]));
  }
  if (!IsNull(r[10])) {
    bool dry_run = false;
    if (r[10]->get_bool().get(dry_run)) return std::nullopt;
    call.set_dry_run(dry_run);
  }
  call.set_server_version(server_version);
  return out;
}

}  // namespace

absl::StatusOr<ReviewCall> ParseReviewCall(std::string_view body,
                                           const std::string& server_version) {
  if (auto fast = Fast(body, server_version)) return *std::move(fast);
  WISP_ASSIGN_OR_RETURN(k8s::AdmissionReview review, k8s::ParseAdmissionReview(body));
  ReviewCall out;
  out.api_version = std::move(review.api_version);
  out.call = ToAdmissionCall(review.request, server_version);
  const k8s::AdmissionRequest& r = review.request;
  if (r.kind.group.empty() && r.kind.kind == "Pod" && r.object.is_object()) {
    for (const char* field : {"serviceAccountName", "serviceAccount"}) {
      const auto spec = r.object.find("spec");
      if (spec == r.object.end() || !spec->is_object()) break;
      const auto sa = spec->find(field);
      if (sa != spec->end() && sa->is_string() && !sa->get<std::string>().empty()) {
        out.service_account = sa->get<std::string>();
        break;
      }
    }
    if (out.service_account.empty()) out.service_account = "default";
  }
  return out;
}

}  // namespace wisp::gateway::admission
