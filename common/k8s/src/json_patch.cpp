#include "wisp/k8s/json_patch.hpp"

#include <algorithm>
#include <cctype>

namespace wisp::k8s {
namespace {

void DiffInto(const Json& from, const Json& to, const std::string& path, Json& ops);

void DiffArrays(const Json& from, const Json& to, const std::string& path, Json& ops) {
  const size_t n = from.size();
  const size_t m = to.size();
  size_t prefix = 0;
  while (prefix < n && prefix < m && from[prefix] == to[prefix]) ++prefix;
  size_t suffix = 0;
  while (suffix < n - prefix && suffix < m - prefix && from[n - 1 - suffix] == to[m - 1 - suffix]) {
    ++suffix;
  }
  const size_t old_mid = n - prefix - suffix;
  const size_t new_mid = m - prefix - suffix;
  const size_t common = std::min(old_mid, new_mid);
  // Elements present on both sides of the changed window are diffed in place (a changed container
  // becomes a few member operations, not a replace of the whole container).
  for (size_t i = 0; i < common; ++i) {
    DiffInto(from[prefix + i], to[prefix + i], path + "/" + std::to_string(prefix + i), ops);
  }
  // Surplus old elements: remove from the highest index down so earlier indices stay valid.
  for (size_t i = old_mid; i > common; --i) {
    ops.push_back({{"op", "remove"}, {"path", path + "/" + std::to_string(prefix + i - 1)}});
  }
  // Surplus new elements: add in order; the current length equals the index when appending.
  for (size_t i = common; i < new_mid; ++i) {
    size_t index = prefix + i;
    bool at_end = suffix == 0;
    ops.push_back({{"op", "add"},
                   {"path", path + "/" + (at_end ? std::string("-") : std::to_string(index))},
                   {"value", to[index]}});
  }
}

void DiffInto(const Json& from, const Json& to, const std::string& path, Json& ops) {
  if (from == to) return;
  if (from.is_object() && to.is_object()) {
    for (auto it = from.begin(); it != from.end(); ++it) {
      if (!to.contains(it.key())) {
        ops.push_back({{"op", "remove"}, {"path", AppendPointer(path, it.key())}});
      }
    }
    for (auto it = to.begin(); it != to.end(); ++it) {
      auto old = from.find(it.key());
      if (old == from.end()) {
        ops.push_back({{"op", "add"}, {"path", AppendPointer(path, it.key())}, {"value", *it}});
      } else {
        DiffInto(*old, *it, AppendPointer(path, it.key()), ops);
      }
    }
    return;
  }
  if (from.is_array() && to.is_array()) {
    DiffArrays(from, to, path, ops);
    return;
  }
  ops.push_back({{"op", "replace"}, {"path", path}, {"value", to}});
}

absl::Status OpError(size_t index, const std::string& op, const std::string& path,
                     const std::string& problem) {
  return absl::InvalidArgumentError("patch[" + std::to_string(index) + "] (" + op + " " + path +
                                    "): " + problem);
}

// Parses an array index token: digits only, no leading zeros (RFC 6901 section 4).
bool ParseIndex(std::string_view token, size_t* out) {
  if (token.empty() || token.size() > 18) return false;
  if (token.size() > 1 && token[0] == '0') return false;
  size_t v = 0;
  for (char c : token) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + static_cast<size_t>(c - '0');
  }
  *out = v;
  return true;
}

// Walks to the parent of the pointer's last token. Returns nullptr with `problem` set on failure.
Json* Parent(Json& doc, const std::vector<std::string>& tokens, std::string* problem) {
  Json* cur = &doc;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (cur->is_object()) {
      auto it = cur->find(t);
      if (it == cur->end()) {
        *problem = "path does not exist";
        return nullptr;
      }
      cur = &*it;
    } else if (cur->is_array()) {
      size_t idx = 0;
      if (!ParseIndex(t, &idx) || idx >= cur->size()) {
        *problem = "path does not exist";
        return nullptr;
      }
      cur = &(*cur)[idx];
    } else {
      *problem = "path does not exist";
      return nullptr;
    }
  }
  return cur;
}

absl::StatusOr<Json*> Locate(Json& doc, const std::vector<std::string>& tokens) {
  Json* cur = &doc;
  for (const auto& t : tokens) {
    if (cur->is_object()) {
      auto it = cur->find(t);
      if (it == cur->end()) return absl::NotFoundError("path does not exist");
      cur = &*it;
    } else if (cur->is_array()) {
      size_t idx = 0;
      if (!ParseIndex(t, &idx) || idx >= cur->size()) {
        return absl::NotFoundError("path does not exist");
      }
      cur = &(*cur)[idx];
    } else {
      return absl::NotFoundError("path does not exist");
    }
  }
  return cur;
}

absl::Status Add(Json& doc, const std::vector<std::string>& tokens, Json value,
                 std::string* problem) {
  if (tokens.empty()) {
    doc = std::move(value);
    return absl::OkStatus();
  }
  Json* parent = Parent(doc, tokens, problem);
  if (parent == nullptr) return absl::InvalidArgumentError(*problem);
  const std::string& last = tokens.back();
  if (parent->is_object()) {
    (*parent)[last] = std::move(value);
    return absl::OkStatus();
  }
  if (parent->is_array()) {
    if (last == "-") {
      parent->push_back(std::move(value));
      return absl::OkStatus();
    }
    size_t idx = 0;
    if (!ParseIndex(last, &idx) || idx > parent->size()) {
      *problem = "array index out of range";
      return absl::InvalidArgumentError(*problem);
    }
    parent->insert(parent->begin() + static_cast<std::ptrdiff_t>(idx), std::move(value));
    return absl::OkStatus();
  }
  *problem = "parent is neither an object nor an array";
  return absl::InvalidArgumentError(*problem);
}

absl::StatusOr<Json> Remove(Json& doc, const std::vector<std::string>& tokens,
                            std::string* problem) {
  if (tokens.empty()) {
    *problem = "cannot remove the whole document";
    return absl::InvalidArgumentError(*problem);
  }
  Json* parent = Parent(doc, tokens, problem);
  if (parent == nullptr) return absl::InvalidArgumentError(*problem);
  const std::string& last = tokens.back();
  if (parent->is_object()) {
    auto it = parent->find(last);
    if (it == parent->end()) {
      *problem = "path does not exist";
      return absl::InvalidArgumentError(*problem);
    }
    Json removed = std::move(*it);
    parent->erase(it);
    return removed;
  }
  if (parent->is_array()) {
    size_t idx = 0;
    if (!ParseIndex(last, &idx) || idx >= parent->size()) {
      *problem = "path does not exist";
      return absl::InvalidArgumentError(*problem);
    }
    Json removed = std::move((*parent)[idx]);
    parent->erase(parent->begin() + static_cast<std::ptrdiff_t>(idx));
    return removed;
  }
  *problem = "path does not exist";
  return absl::InvalidArgumentError(*problem);
}

bool IsPrefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

Json Diff(const Json& from, const Json& to) {
  Json ops = Json::array();
  DiffInto(from, to, "", ops);
  return ops;
}

absl::StatusOr<Json> ApplyPatch(const Json& document, const Json& patch) {
  if (!patch.is_array()) return absl::InvalidArgumentError("patch must be a JSON array");
  Json doc = document;
  for (size_t i = 0; i < patch.size(); ++i) {
    const Json& op = patch[i];
    if (!op.is_object()) return OpError(i, "?", "?", "operation must be an object");
    auto op_it = op.find("op");
    auto path_it = op.find("path");
    if (op_it == op.end() || !op_it->is_string()) return OpError(i, "?", "?", "missing \"op\"");
    const std::string name = op_it->get<std::string>();
    if (path_it == op.end() || !path_it->is_string()) {
      return OpError(i, name, "?", "missing \"path\"");
    }
    const std::string path = path_it->get<std::string>();
    auto tokens = SplitPointer(path);
    if (!tokens.ok()) return OpError(i, name, path, std::string(tokens.status().message()));
    std::string problem;
    auto need_value = [&]() -> absl::StatusOr<Json> {
      auto v = op.find("value");
      if (v == op.end()) return OpError(i, name, path, "missing \"value\"");
      return *v;
    };
    auto need_from = [&]() -> absl::StatusOr<std::vector<std::string>> {
      auto f = op.find("from");
      if (f == op.end() || !f->is_string()) return OpError(i, name, path, "missing \"from\"");
      auto from_tokens = SplitPointer(f->get<std::string>());
      if (!from_tokens.ok()) {
        return OpError(i, name, path, std::string(from_tokens.status().message()));
      }
      return *from_tokens;
    };
    if (name == "add") {
      WISP_ASSIGN_OR_RETURN(Json value, need_value());
      if (!Add(doc, *tokens, std::move(value), &problem).ok()) {
        return OpError(i, name, path, problem);
      }
    } else if (name == "remove") {
      if (!Remove(doc, *tokens, &problem).ok()) return OpError(i, name, path, problem);
    } else if (name == "replace") {
      WISP_ASSIGN_OR_RETURN(Json value, need_value());
      auto target = Locate(doc, *tokens);
      if (!target.ok()) return OpError(i, name, path, std::string(target.status().message()));
      **target = std::move(value);
    } else if (name == "move") {
      WISP_ASSIGN_OR_RETURN(auto from, need_from());
      if (IsPrefix(from, *tokens)) {
        return OpError(i, name, path, "cannot move a value into one of its children");
      }
      auto removed = Remove(doc, from, &problem);
      if (!removed.ok()) return OpError(i, name, path, "from: " + problem);
      if (!Add(doc, *tokens, std::move(*removed), &problem).ok()) {
        return OpError(i, name, path, problem);
      }
    } else if (name == "copy") {
      WISP_ASSIGN_OR_RETURN(auto from, need_from());
      auto source = Locate(doc, from);
      if (!source.ok()) return OpError(i, name, path, "from: path does not exist");
      Json value = **source;
      if (!Add(doc, *tokens, std::move(value), &problem).ok()) {
        return OpError(i, name, path, problem);
      }
    } else if (name == "test") {
      WISP_ASSIGN_OR_RETURN(Json value, need_value());
      auto target = Locate(doc, *tokens);
      if (!target.ok()) return OpError(i, name, path, std::string(target.status().message()));
      if (**target != value) return OpError(i, name, path, "test failed: value differs");
    } else {
      return OpError(i, name, path, "unknown op");
    }
  }
  return doc;
}

absl::StatusOr<Json> ApplyPatch(const Json& document, std::string_view patch_json) {
  WISP_ASSIGN_OR_RETURN(Json patch, ParseJson(patch_json, "patch"));
  return ApplyPatch(document, patch);
}

}  // namespace wisp::k8s
