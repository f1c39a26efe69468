#include "transfer/freeze.h"

#include <set>

#include "framework/error.h"
// The one layer type freezing changes beyond lr_mult; both binaries that link
// strata_transfer link the layers too.

namespace strata::transfer {

namespace {

std::string join(const std::vector<std::string>& v, size_t limit = 40) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size() - limit) + " more)";
  return s;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative matching with one backtrack point for the last '*'.
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string FreezeReport::str() const {
  std::string s = "froze " + std::to_string(layers.size()) + " layer" + (layers.size() == 1 ? "" : "s") + " (" +
                  std::to_string(params.size()) + " parameter" + (params.size() == 1 ? "" : "s") + ")";
  if (!layers.empty()) s += ": " + join(layers, 12);
  if (!batch_norms.empty()) s += "; BatchNorm on running statistics: " + join(batch_norms, 12);
  return s;
}

FreezeReport freeze_layers(Net& net, const std::vector<std::string>& patterns, const std::string& flag) {
  std::vector<std::string> names;
  for (int i = 0; i < net.num_layers(); ++i) names.push_back(net.layer(i).name());
  std::vector<bool> frozen(names.size(), false);
  for (const std::string& pattern : patterns) {
    bool any = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (glob_match(pattern, names[i])) frozen[i] = any = true;
    }
    if (!any) {
      fail<ConfigError>(flag, " '", pattern, "' matches no layer of net '", net.name(), "' (patterns use * and ?; ",
                        "the layers are: ", join(names), ")");
    }
  }
  FreezeReport report;
  std::set<int> params;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!frozen[i]) continue;
    report.layers.push_back(names[i]);
    Layer& layer = net.layer(static_cast<int>(i));
    for (const LayerParam& lp : layer.params()) {
      for (size_t k = 0; k < net.params().size(); ++k) {
        const NetParam& p = net.params()[k];
        if (p.blob == lp.blob && p.learnable == Learnable::kYes && params.insert(static_cast<int>(k)).second) {
          report.params.push_back(p.name);
        }
      }
    }
    if (layer.freeze_statistics()) report.batch_norms.push_back(names[i]);
  }
  for (int k : params) net.set_lr_mult(k, 0.0f);
  return report;
}

}  // namespace strata::transfer
