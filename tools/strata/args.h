// Command-line flags for the strata subcommands: `--name value`,
// `--name=value` and boolean `--name`. Unknown flags are errors that suggest
// the nearest known flag.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace strata::cli {

enum class FlagKind { kValue, kSwitch, kRepeated };

struct FlagSpec {
  std::string name;  // without dashes
  FlagKind kind;
  std::string help;
  std::string default_value;  // shown in help; "" = none
};

class Args {
 public:
  Args(std::string command, std::vector<FlagSpec> specs);
  // Throws strata::ConfigError naming the flag for unknown flags or missing values.
  void parse(int argc, char** argv, int first);
  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  int get_int(const std::string& name, int def) const;
  // ConfigError "strata train: --solver is required".
  std::string require(const std::string& name) const;
  std::string help() const;

 private:
  const FlagSpec* find(const std::string& name) const;

  std::string command_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace strata::cli
