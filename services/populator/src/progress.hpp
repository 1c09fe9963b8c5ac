#pragma once
// Progress as CDI shows it: "45.30%" while importing ("%.2f%%" of the source bytes read), "N/A"
// when the total is unknown, and "100.0%" only once the volume is complete. Values that would print
// as 100 are held back at 99.99% while conversion and verification are still pending.
//
//   FormatProgress(0.453) == "45.30%";  FormatProgress(std::nullopt) == "N/A";
#include <optional>
#include <string>

namespace wisp::populator {

inline constexpr char kProgressUnknown[] = "N/A";
inline constexpr char kProgressDone[] = "100.0%";

std::string FormatProgress(std::optional<double> ratio);

}  // namespace wisp::populator
