#include "parallel/estimate/times_file.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "framework/error.h"

namespace strata::estimate {

namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  const size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

void write_times_file(const std::string& path, const StepProfile& profile, const std::string& comment) {
  std::ofstream out(path);
  if (!out) fail<IoError>("cannot write the times file '", path, "': ", std::strerror(errno), "; check the folder exists");
  out << "# " << comment << "\n# net: " << profile.net << "\n# batch: " << profile.batch << "\n";
  char scale[64];
  std::snprintf(scale, sizeof scale, "# activation_scale: %.17g\n", profile.activation_scale);
  out << scale;
  out << "layer,type,forward_ms,backward_ms,grad_bytes,top_bytes,bottom_bytes,split,param_bytes,activation_bytes\n";
  char buf[256], tail[128];
  for (const LayerProfile& l : profile.layers) {
    std::snprintf(buf, sizeof buf, ",%.6f,%.6f,%.0f,%.0f,%.0f,", l.forward * 1e3, l.backward * 1e3, l.grad_bytes,
                  l.top_bytes, l.bottom_bytes);
    std::snprintf(tail, sizeof tail, ",%.0f,%.0f", l.param_bytes, l.activation_bytes);
    out << l.name << "," << l.type << buf << l.split << tail << "\n";
  }
  if (!out) fail<IoError>("writing the times file '", path, "' failed (disk full?)");
}

StepProfile read_times_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail<IoError>("cannot read the times file '", path, "': ", std::strerror(errno));
  StepProfile profile;
  std::map<std::string, size_t> column;
  std::string line;
  int line_no = 0;
  auto where = [&] { return path + ":" + std::to_string(line_no); };
  auto number = [&](const std::vector<std::string>& cells, const std::string& name, bool required) -> double {
    const auto it = column.find(name);
    if (it == column.end() || it->second >= cells.size() || trim(cells[it->second]).empty()) {
      if (required) fail<ConfigError>(where(), ": no value in column '", name, "'");
      return 0.0;
    }
    const std::string text = trim(cells[it->second]);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (*end != '\0' || !(v >= 0) || v > 1e300) {
      fail<ConfigError>(where(), ": column '", name, "' must be a number >= 0, got '", text, "'");
    }
    return v;
  };
  while (std::getline(in, line)) {
    ++line_no;
    line = trim(line);
    if (line.empty()) continue;
    if (line[0] == '#') {
      const std::string body = trim(line.substr(1));
      if (body.rfind("net:", 0) == 0) profile.net = trim(body.substr(4));
      if (body.rfind("activation_scale:", 0) == 0) {
        const std::string text = trim(body.substr(17));
        char* end = nullptr;
        profile.activation_scale = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(profile.activation_scale >= 0) || profile.activation_scale > 1e6) {
          fail<ConfigError>(where(), ": '# activation_scale:' must be a number >= 0, got '", text, "'");
        }
      }
      if (body.rfind("batch:", 0) == 0) {
        profile.batch = std::atoi(body.substr(6).c_str());
        if (profile.batch < 1) fail<ConfigError>(where(), ": '# batch:' must be a positive integer");
      }
      continue;
    }
    const std::vector<std::string> cells = split_csv(line);
    if (column.empty()) {
      for (size_t i = 0; i < cells.size(); ++i) column[trim(cells[i])] = i;
      for (const char* need : {"layer", "forward_ms", "backward_ms", "grad_bytes"}) {
        if (!column.count(need)) {
          fail<ConfigError>(where(), ": the header has no column '", need,
                            "' (expected layer,type,forward_ms,backward_ms,grad_bytes,top_bytes,bottom_bytes,split,param_bytes,"
                            "activation_bytes)");
        }
      }
      continue;
    }
    LayerProfile l;
    auto text = [&](const std::string& name) {
      const auto it = column.find(name);
      return it == column.end() || it->second >= cells.size() ? std::string() : trim(cells[it->second]);
    };
    l.name = text("layer");
    if (l.name.empty()) fail<ConfigError>(where(), ": no layer name");
    l.type = text("type");
    l.split = text("split");
    l.forward = number(cells, "forward_ms", true) / 1e3;
    l.backward = number(cells, "backward_ms", true) / 1e3;
    l.grad_bytes = number(cells, "grad_bytes", true);
    l.top_bytes = number(cells, "top_bytes", false);
    l.bottom_bytes = number(cells, "bottom_bytes", false);
    // Files without them (older ones, or written by hand): every parameter
    // learnable, and no layer in place.
    l.param_bytes = text("param_bytes").empty() ? l.grad_bytes : number(cells, "param_bytes", false);
    l.activation_bytes = text("activation_bytes").empty() ? l.top_bytes : number(cells, "activation_bytes", false);
    profile.layers.push_back(l);
  }
  if (profile.layers.empty()) {
    fail<ConfigError>("the times file '", path, "' has no layer rows (write one with strata time --out FILE)");
  }
  return profile;
}

}  // namespace strata::estimate
