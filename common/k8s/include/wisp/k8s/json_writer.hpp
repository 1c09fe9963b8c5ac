#pragma once
// Compact JSON text written directly, for answers built on a hot path without an nlohmann tree.
//
// Contract:
//   - AppendJsonString writes `s` as a JSON string exactly as nlohmann::json::dump() would (so text
//     written here and text dumped from a tree agree byte for byte). It returns false when `s` is
//     not valid UTF-8; what was written is then unspecified and the caller must not use it.
//   - JsonWriter places the commas and colons; the caller nests Begin/End pairs correctly and calls
//     Key before each member's value. Raw() inserts text that is already one JSON value. ok() is
//     false once a string was not valid UTF-8; Take() then returns text not to be used.
//
// Example:
//   k8s::JsonWriter w;
//   w.BeginObject().Key("op").String("add").Key("path").String("/spec/volumes/0");
//   w.Key("value").BeginObject().Key("name").String("v").EndObject().EndObject();
//   if (w.ok()) send(w.Take());  // {"op":"add","path":"/spec/volumes/0","value":{"name":"v"}}
#include <cstdint>
#include <string>
#include <string_view>

namespace wisp::k8s {

bool AppendJsonString(std::string& out, std::string_view s);

class JsonWriter {
 public:
  JsonWriter() = default;
  // Starts with room for `capacity` bytes of text.
  explicit JsonWriter(size_t capacity) { out_.reserve(capacity); }

  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Raw(std::string_view json);

  bool ok() const { return ok_; }
  bool empty() const { return out_.empty(); }
  const std::string& text() const { return out_; }
  std::string Take();

 private:
  JsonWriter& Open(char c);
  JsonWriter& Close(char c);
  void Separate();

  std::string out_;
  bool comma_ = false;  // the next value or key follows a sibling
  bool ok_ = true;
};

}  // namespace wisp::k8s
