#include "wisp/k8s/admission_review.hpp"

#include <absl/strings/escaping.h>

#include "wisp/k8s/json_writer.hpp"

namespace wisp::k8s {
namespace {

absl::Status Missing(std::string_view field) {
  return absl::InvalidArgumentError(std::string(field) + " is missing");
}

absl::Status WrongType(std::string_view field, std::string_view type) {
  return absl::InvalidArgumentError(std::string(field) + " is not " + std::string(type));
}

// Reads an optional string member; a present non-string is an error naming the field.
absl::Status OptString(const Json& obj, std::string_view key, std::string_view field,
                       std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return WrongType(field, "a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReqString(const Json& obj, std::string_view key, std::string_view field,
                       std::string* out) {
  WISP_RETURN_IF_ERROR(OptString(obj, key, field, out));
  if (out->empty()) return Missing(field);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AdmissionReview> ParseAdmissionReview(std::string_view body) {
  WISP_ASSIGN_OR_RETURN(Json doc, ParseJson(body, "body"));
  if (!doc.is_object()) return WrongType("body", "a JSON object");
  AdmissionReview review;
  std::string kind;
  WISP_RETURN_IF_ERROR(ReqString(doc, "apiVersion", "apiVersion", &review.api_version));
  if (review.api_version != kAdmissionApiVersion &&
      review.api_version != kAdmissionApiVersionBeta) {
    return absl::InvalidArgumentError("apiVersion \"" + review.api_version + "\" is not " +
                                      std::string(kAdmissionApiVersion));
  }
  WISP_RETURN_IF_ERROR(ReqString(doc, "kind", "kind", &kind));
  if (kind != kAdmissionReviewKind) {
    return absl::InvalidArgumentError("kind \"" + kind + "\" is not AdmissionReview");
  }
  auto req_it = doc.find("request");
  if (req_it == doc.end() || req_it->is_null()) return Missing("request");
  if (!req_it->is_object()) return WrongType("request", "an object");
  const Json& req = *req_it;
  AdmissionRequest& r = review.request;
  WISP_RETURN_IF_ERROR(ReqString(req, "uid", "request.uid", &r.uid));
  auto kind_it = req.find("kind");
  if (kind_it == req.end() || kind_it->is_null()) return Missing("request.kind");
  if (!kind_it->is_object()) return WrongType("request.kind", "an object");
  WISP_RETURN_IF_ERROR(OptString(*kind_it, "group", "request.kind.group", &r.kind.group));
  WISP_RETURN_IF_ERROR(ReqString(*kind_it, "version", "request.kind.version", &r.kind.version));
  WISP_RETURN_IF_ERROR(ReqString(*kind_it, "kind", "request.kind.kind", &r.kind.kind));
  if (auto res = req.find("resource"); res != req.end() && !res->is_null()) {
    if (!res->is_object()) return WrongType("request.resource", "an object");
    WISP_RETURN_IF_ERROR(OptString(*res, "group", "request.resource.group", &r.resource.group));
    WISP_RETURN_IF_ERROR(
        OptString(*res, "version", "request.resource.version", &r.resource.version));
    WISP_RETURN_IF_ERROR(
        OptString(*res, "resource", "request.resource.resource", &r.resource.resource));
  }
  WISP_RETURN_IF_ERROR(OptString(req, "subResource", "request.subResource", &r.sub_resource));
  WISP_RETURN_IF_ERROR(ReqString(req, "operation", "request.operation", &r.operation));
  if (r.operation != "CREATE" && r.operation != "UPDATE" && r.operation != "DELETE" &&
      r.operation != "CONNECT") {
    return absl::InvalidArgumentError("request.operation \"" + r.operation +
                                      "\" is not one of CREATE, UPDATE, DELETE, CONNECT");
  }
  WISP_RETURN_IF_ERROR(OptString(req, "name", "request.name", &r.name));
  WISP_RETURN_IF_ERROR(OptString(req, "namespace", "request.namespace", &r.namespace_));
  if (auto ui = req.find("userInfo"); ui != req.end() && !ui->is_null()) {
    if (!ui->is_object()) return WrongType("request.userInfo", "an object");
    WISP_RETURN_IF_ERROR(OptString(*ui, "username", "request.userInfo.username", &r.user.username));
    WISP_RETURN_IF_ERROR(OptString(*ui, "uid", "request.userInfo.uid", &r.user.uid));
    if (auto g = ui->find("groups"); g != ui->end() && !g->is_null()) {
      if (!g->is_array()) return WrongType("request.userInfo.groups", "an array");
      for (const auto& group : *g) {
        if (!group.is_string()) return WrongType("request.userInfo.groups[]", "a string");
        r.user.groups.push_back(group.get<std::string>());
      }
    }
  }
  if (auto o = req.find("object"); o != req.end() && !o->is_null()) {
    if (!o->is_object()) return WrongType("request.object", "an object");
    r.object = *o;
  }
  if (auto o = req.find("oldObject"); o != req.end() && !o->is_null()) {
    if (!o->is_object()) return WrongType("request.oldObject", "an object");
    r.old_object = *o;
  }
  if (r.object.is_null() && (r.operation == "CREATE" || r.operation == "UPDATE")) {
    return Missing("request.object");
  }
  if (auto d = req.find("dryRun"); d != req.end() && !d->is_null()) {
    if (!d->is_boolean()) return WrongType("request.dryRun", "a boolean");
    r.dry_run = d->get<bool>();
  }
  return review;
}

std::string EncodeAdmissionReviewWithJson(std::string_view api_version,
                                          const AdmissionResponse& response) {
  Json resp = {{"uid", response.uid}, {"allowed", response.allowed}};
  if (!response.patch.empty()) {
    resp["patchType"] = "JSONPatch";
    resp["patch"] = absl::Base64Escape(response.patch);
  }
  if (!response.warnings.empty()) resp["warnings"] = response.warnings;
  if (!response.audit_annotations.empty()) resp["auditAnnotations"] = response.audit_annotations;
  if (!response.message.empty() || response.code != 0 || !response.allowed) {
    Json status = Json::object();
    if (!response.message.empty()) status["message"] = response.message;
    if (response.code != 0) status["code"] = response.code;
    if (!response.reason.empty()) status["reason"] = response.reason;
    if (!response.allowed) status["status"] = "Failure";
    resp["status"] = std::move(status);
  }
  Json out = {{"apiVersion", api_version.empty() ? kAdmissionApiVersion : api_version},
              {"kind", kAdmissionReviewKind},
              {"response", std::move(resp)}};
  return out.dump();
}

// Written directly rather than through a Json tree (this is on every admission answer): the same
// bytes nlohmann's dump() gives, keys in its (sorted) order.
std::string EncodeAdmissionReview(std::string_view api_version, const AdmissionResponse& response) {
  std::string out;
  out.reserve(256 + response.patch.size() * 4 / 3 + response.message.size());
  bool ok = true;
  auto str = [&](std::string_view s) { ok = AppendJsonString(out, s) && ok; };
  out += "{\"apiVersion\":";
  str(api_version.empty() ? kAdmissionApiVersion : api_version);
  out += ",\"kind\":";
  str(kAdmissionReviewKind);
  out += ",\"response\":{\"allowed\":";
  out += response.allowed ? "true" : "false";
  if (!response.audit_annotations.empty()) {
    out += ",\"auditAnnotations\":{";
    bool first = true;
    for (const auto& [k, v] : response.audit_annotations) {
      if (!first) out.push_back(',');
      first = false;
      str(k);
      out.push_back(':');
      str(v);
    }
    out.push_back('}');
  }
  if (!response.patch.empty()) {
    out += ",\"patch\":\"";
    out += absl::Base64Escape(response.patch);
    out += "\",\"patchType\":\"JSONPatch\"";
  }
  if (!response.message.empty() || response.code != 0 || !response.allowed) {
    out += ",\"status\":{";
    bool first = true;
    auto sep = [&] {
      if (!first) out.push_back(',');
      first = false;
    };
    if (response.code != 0) {
      sep();
      out += "\"code\":" + std::to_string(response.code);
    }
    if (!response.message.empty()) {
      sep();
      out += "\"message\":";
      str(response.message);
    }
    if (!response.reason.empty()) {
      sep();
      out += "\"reason\":";
      str(response.reason);
    }
    if (!response.allowed) {
      sep();
      out += "\"status\":\"Failure\"";
    }
    out.push_back('}');
  }
  out += ",\"uid\":";
  str(response.uid);
  if (!response.warnings.empty()) {
    out += ",\"warnings\":[";
    for (size_t i = 0; i < response.warnings.size(); ++i) {
      if (i > 0) out.push_back(',');
      str(response.warnings[i]);
    }
    out.push_back(']');
  }
  out += "}}";
  // A string that is not valid UTF-8: nlohmann's behaviour (it throws type_error 316).
  if (!ok) return EncodeAdmissionReviewWithJson(api_version, response);
  return out;
}

}  // namespace wisp::k8s
