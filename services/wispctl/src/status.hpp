#pragma once
#include <string>
#include <vector>

#include "wisp/bus/service.hpp"

namespace wisp::wispctl {

// `wispctl status [--json] [--expect a,b,...]`
int RunStatus(const std::vector<std::string>& args);

// The human table of what discovery found (pure, for tests).
std::string FormatStatus(const std::vector<bus::ServiceInstance>& instances);
std::string FormatStatusJson(const std::vector<bus::ServiceInstance>& instances);

}  // namespace wisp::wispctl
