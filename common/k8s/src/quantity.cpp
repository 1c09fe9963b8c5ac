#include "wisp/k8s/quantity.hpp"

#include <cctype>
#include <cmath>

namespace wisp::k8s {

int64_t Quantity::Bytes() const {
  long double v = std::ceil(value_);
  if (v > static_cast<long double>(INT64_MAX)) return INT64_MAX;
  if (v < static_cast<long double>(INT64_MIN)) return INT64_MIN;
  return static_cast<int64_t>(v);
}

absl::StatusOr<Quantity> ParseQuantity(std::string_view text) {
  const absl::Status bad = absl::InvalidArgumentError(std::string(kQuantityRegexMessage));
  if (text.empty()) return bad;
  size_t i = 0;
  bool negative = false;
  if (text[i] == '+' || text[i] == '-') {
    negative = text[i] == '-';
    ++i;
  }
  // Number: digits with at most one '.', at least one digit.
  size_t num_start = i;
  int digits = 0;
  bool dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (dot) return bad;
      dot = true;
    } else {
      ++digits;
    }
    ++i;
  }
  if (digits == 0) return bad;
  std::string number(text.substr(num_start, i - num_start));
  long double value = std::strtold(number.c_str(), nullptr);
  std::string_view suffix = text.substr(i);
  long double multiplier = 1;
  if (suffix.empty()) {
  } else if (suffix == "Ki") {
    multiplier = 1024.0L;
  } else if (suffix == "Mi") {
    multiplier = std::pow(1024.0L, 2);
  } else if (suffix == "Gi") {
    multiplier = std::pow(1024.0L, 3);
  } else if (suffix == "Ti") {
    multiplier = std::pow(1024.0L, 4);
  } else if (suffix == "Pi") {
    multiplier = std::pow(1024.0L, 5);
  } else if (suffix == "Ei") {
    multiplier = std::pow(1024.0L, 6);
  } else if (suffix == "n") {
    multiplier = 1e-9L;
  } else if (suffix == "u") {
    multiplier = 1e-6L;
  } else if (suffix == "m") {
    multiplier = 1e-3L;
  } else if (suffix == "k") {
    multiplier = 1e3L;
  } else if (suffix == "M") {
    multiplier = 1e6L;
  } else if (suffix == "G") {
    multiplier = 1e9L;
  } else if (suffix == "T") {
    multiplier = 1e12L;
  } else if (suffix == "P") {
    multiplier = 1e15L;
  } else if (suffix == "E") {
    multiplier = 1e18L;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view exp = suffix.substr(1);
    size_t j = 0;
    bool neg_exp = false;
    if (j < exp.size() && (exp[j] == '+' || exp[j] == '-')) {
      neg_exp = exp[j] == '-';
      ++j;
    }
    if (j >= exp.size() || exp.size() - j > 4) return bad;
    int e = 0;
    for (; j < exp.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(exp[j]))) return bad;
      e = e * 10 + (exp[j] - '0');
    }
    multiplier = std::pow(10.0L, neg_exp ? -e : e);
  } else {
    return bad;
  }
  value *= multiplier;
  if (negative) value = -value;
  return Quantity(std::string(text), value);
}

}  // namespace wisp::k8s
