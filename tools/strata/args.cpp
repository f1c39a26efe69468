#include "tools/strata/args.h"

#include <sstream>

#include "framework/config/config.h"
#include "framework/error.h"

namespace strata::cli {

Args::Args(std::string command, std::vector<FlagSpec> specs)
    : command_(std::move(command)), specs_(std::move(specs)) {
  specs_.push_back({"help", FlagKind::kSwitch, "show this help", ""});
}

const FlagSpec* Args::find(const std::string& name) const {
  for (const auto& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      fail<ConfigError>("unexpected argument '", arg,
                        "'; flags start with -- (see strata ", command_, " --help)");
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* spec = find(name);
    if (!spec) {
      std::vector<std::string> names;
      for (const auto& s : specs_) names.push_back(s.name);
      const std::string near = nearest_key(name, names);
      fail<ConfigError>("unknown flag --", name,
                        near.empty() ? "" : "; did you mean --" + near + "?", " (see strata ", command_,
                        " --help)");
    }
    if (spec->kind == FlagKind::kSwitch) {
      if (has_value) fail<ConfigError>("--", name, " takes no value");
      values_[name].push_back("1");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) fail<ConfigError>("--", name, " needs a value");
      value = argv[++i];
    }
    if (spec->kind == FlagKind::kValue && values_.count(name)) {
      fail<ConfigError>("--", name, " given more than once");
    }
    values_[name].push_back(value);
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second.back();
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int Args::get_int(const std::string& name, int def) const {
  if (!has(name)) return def;
  const std::string v = get(name);
  try {
    size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  fail<ConfigError>("--", name, " expects an integer, got '", v, "'");
}

std::string Args::require(const std::string& name) const {
  if (!has(name)) {
    fail<ConfigError>("--", name, " is required (see strata ", command_, " --help)");
  }
  return get(name);
}

std::string Args::help() const {
  std::ostringstream os;
  os << "usage: strata " << command_ << " [flags]\n\nflags:\n";
  for (const auto& s : specs_) {
    std::string flag = "--" + s.name + (s.kind == FlagKind::kSwitch ? "" : " VALUE");
    os << "  " << flag;
    for (size_t i = flag.size(); i < 24; ++i) os << ' ';
    os << s.help;
    if (!s.default_value.empty()) os << " (default: " << s.default_value << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace strata::cli
