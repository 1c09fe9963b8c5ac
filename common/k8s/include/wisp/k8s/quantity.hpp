#pragma once
// Kubernetes resource.Quantity parsing ("250m", "256Mi", "5Gi", "1e3", "0").
//
// Contract: ParseQuantity accepts exactly Kubernetes' grammar, <signedNumber><suffix> with the
// binary (Ki..Ei), decimal (n u m "" k M G T P E) or exponent (e3, E-2) suffixes, and rejects
// anything else with Kubernetes' own message: "quantities must match the regular expression
// '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'". The value is kept as given (text()) for
// patches, plus a numeric value for comparisons.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(k8s::Quantity q, k8s::ParseQuantity("10Gi"));
//   q.Bytes();   // 10737418240
//   q.IsZero();  // false
#include <cstdint>
#include <string>
#include <string_view>

#include "wisp/status/status.hpp"

namespace wisp::k8s {

inline constexpr std::string_view kQuantityRegexMessage =
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

class Quantity {
 public:
  Quantity() = default;
  Quantity(std::string text, long double value) : text_(std::move(text)), value_(value) {}

  const std::string& text() const { return text_; }
  long double value() const { return value_; }
  bool IsZero() const { return value_ == 0; }
  // Rounded up to a whole number (bytes, cores): Kubernetes' Value().
  int64_t Bytes() const;

 private:
  std::string text_;
  long double value_ = 0;
};

absl::StatusOr<Quantity> ParseQuantity(std::string_view text);

}  // namespace wisp::k8s
