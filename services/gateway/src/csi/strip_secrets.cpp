#include "csi/strip_secrets.hpp"

#include <memory>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include "csi/csi.pb.h"

namespace wisp::gateway::csi {
namespace {
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

void Strip(Message& message) {
  const auto* descriptor = message.GetDescriptor();
  const auto* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->options().GetExtension(::csi::v1::csi_secret) &&
          field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && !field->is_repeated() &&
          reflection->HasField(message, field)) {
        reflection->SetString(&message, field, kStripped);
      }
      continue;
    }
    const bool secret = field->options().GetExtension(::csi::v1::csi_secret);
    if (field->is_map()) {
      // A map is a repeated message of {key, value}.
      const auto* entry = field->message_type();
      const FieldDescriptor* key_field = entry->FindFieldByNumber(1);
      const FieldDescriptor* value_field = entry->FindFieldByNumber(2);
      const int n = reflection->FieldSize(message, field);
      for (int j = 0; j < n; ++j) {
        Message* item = reflection->MutableRepeatedMessage(&message, field, j);
        const auto* item_refl = item->GetReflection();
        if (value_field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
          if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
            Strip(*item_refl->MutableMessage(item, value_field));
          }
          continue;
        }
        const bool token_map = key_field->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
                               item_refl->GetString(*item, key_field) == kServiceAccountTokensKey;
        if (secret || token_map) item_refl->SetString(item, value_field, kStripped);
      }
      continue;
    }
    if (field->is_repeated()) {
      const int n = reflection->FieldSize(message, field);
      for (int j = 0; j < n; ++j) Strip(*reflection->MutableRepeatedMessage(&message, field, j));
    } else if (reflection->HasField(message, field)) {
      Strip(*reflection->MutableMessage(&message, field));
    }
  }
}

}  // namespace

std::string StripSecrets(const Message& message) {
  std::unique_ptr<Message> copy(message.New());
  copy->CopyFrom(message);
  Strip(*copy);
  std::string out;
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  printer.PrintToString(*copy, &out);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace wisp::gateway::csi
