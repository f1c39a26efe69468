// Values of a repeatable flag that also takes comma-separated lists
// (`--reinit fc8,fc7 --reinit head`), shared by the subcommands.
#pragma once

#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace strata::cli {

// Every comma-separated item of every value, without empty ones.
inline std::set<std::string> split_list(const std::vector<std::string>& values) {
  std::set<std::string> out;
  for (const auto& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) out.insert(item);
    }
  }
  return out;
}

}  // namespace strata::cli
