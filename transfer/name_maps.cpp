#include "transfer/name_maps.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <regex>

#include "framework/error.h"

namespace strata::transfer {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// "features.12.running_mean" under "features." -> {12, "running_mean"}; false otherwise.
bool split_indexed(const std::string& name, const std::string& prefix, int* index, std::string* rest) {
  if (!starts_with(name, prefix)) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  if (digits.size() > 6) return false;
  *index = std::atoi(digits.c_str());
  *rest = name.substr(dot + 1);
  return true;
}

// One module of the file (features.3 / classifier.0) and its tensors by short name.
struct Group {
  std::string prefix;  // "features.3"
  std::map<std::string, std::string> tensors;  // "weight" -> "features.3.weight"
  bool is_bn() const { return tensors.count("running_mean") || tensors.count("running_var"); }
};

std::vector<Group> groups_of(const std::vector<FileTensor>& tensors, const std::string& prefix,
                             std::vector<std::string>* leftover) {
  std::map<int, Group> by_index;
  for (const FileTensor& t : tensors) {
    int index = 0;
    std::string rest;
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!split_indexed(t.name, prefix, &index, &rest)) {
      leftover->push_back(t.name);  // "features.extra": not a module of the Sequential
      continue;
    }
    Group& g = by_index[index];
    g.prefix = prefix + std::to_string(index);
    if (rest.find('.') != std::string::npos) {
      leftover->push_back(t.name);
      continue;
    }
    g.tensors[rest] = t.name;
  }
  std::vector<Group> out;
  for (auto& kv : by_index) out.push_back(std::move(kv.second));
  return out;
}

enum class SlotKind { kConv, kBatchNorm, kInnerProduct };

struct Slot {
  SlotKind kind;
  std::string layer;        // the Convolution / BatchNorm / InnerProduct layer
  std::string scale_layer;  // the Scale after a BatchNorm ("" if none)
};

const char* kind_name(SlotKind k) {
  switch (k) {
    case SlotKind::kConv: return "Convolution";
    case SlotKind::kBatchNorm: return "BatchNorm";
    case SlotKind::kInnerProduct: return "InnerProduct";
  }
  return "?";
}

}  // namespace

NameMap map_identity(const std::vector<FileTensor>& tensors) {
  NameMap m;
  for (const FileTensor& t : tensors) m.routes.push_back({t.name, t.name});
  return m;
}

NameMap map_torchvision_vgg(const Net& net, const std::vector<FileTensor>& tensors) {
  NameMap m;
  for (const FileTensor& t : tensors) {
    if (!starts_with(t.name, "features.") && !starts_with(t.name, "classifier.")) m.unmapped.push_back(t.name);
  }
  const std::vector<Group> features = groups_of(tensors, "features.", &m.unmapped);
  const std::vector<Group> classifier = groups_of(tensors, "classifier.", &m.unmapped);

  std::vector<Slot> feature_slots, classifier_slots;
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer& l = net.layer(i);
    if (l.type() == "Convolution") {
      feature_slots.push_back({SlotKind::kConv, l.name(), ""});
    } else if (l.type() == "BatchNorm") {
      Slot s{SlotKind::kBatchNorm, l.name(), ""};
      if (i + 1 < net.num_layers() && net.layer(i + 1).type() == "Scale") s.scale_layer = net.layer(i + 1).name();
      feature_slots.push_back(s);
    } else if (l.type() == "InnerProduct") {
      classifier_slots.push_back({SlotKind::kInnerProduct, l.name(), ""});
    }
  }

  auto route_rest = [&](const Group& g, const std::map<std::string, std::string>& targets) {
    for (const auto& [short_name, file_name] : g.tensors) {
      auto it = targets.find(short_name);
      if (it != targets.end()) {
        m.routes.push_back({file_name, it->second});
      } else if (short_name == "num_batches_tracked") {
        m.dropped.push_back(file_name);
      } else {
        m.unmapped.push_back(file_name);
      }
    }
  };

  for (size_t k = 0; k < features.size(); ++k) {
    const Group& g = features[k];
    if (k >= feature_slots.size()) {  // a deeper VGG's file: the rest is unexpected
      route_rest(g, {});
      continue;
    }
    const Slot& s = feature_slots[k];
    const SlotKind file_kind = g.is_bn() ? SlotKind::kBatchNorm : SlotKind::kConv;
    if (file_kind != s.kind) {
      fail<ShapeError>("torchvision VGG weights do not fit net '", net.name(), "': ", g.prefix, " is a ",
                       kind_name(file_kind), " but the net's layer number ", k + 1,
                       " with weights in the feature part is ", kind_name(s.kind), " '", s.layer, "'",
                       file_kind == SlotKind::kBatchNorm ? " (weights of a VGG with BN, e.g. vgg16_bn, need the _bn model)"
                                                         : " (weights of a VGG without BN need the model without _bn)");
    }
    if (s.kind == SlotKind::kConv) {
      route_rest(g, {{"weight", s.layer + ".weight"}, {"bias", s.layer + ".bias"}});
    } else {
      std::map<std::string, std::string> t = {{"running_mean", s.layer + ".running_mean"},
                                              {"running_var", s.layer + ".running_var"}};
      if (!s.scale_layer.empty()) {
        t["weight"] = s.scale_layer + ".weight";
        t["bias"] = s.scale_layer + ".bias";
      }
      route_rest(g, t);
    }
  }
  for (size_t k = 0; k < classifier.size(); ++k) {
    if (k >= classifier_slots.size()) {
      route_rest(classifier[k], {});
      continue;
    }
    const std::string& layer = classifier_slots[k].layer;
    route_rest(classifier[k], {{"weight", layer + ".weight"}, {"bias", layer + ".bias"}});
  }
  return m;
}

namespace {

// Rules of one spelling: a regex on the file name and the strata name it
// becomes, where $1 is the block index.
struct Rule {
  std::regex pattern;
  std::string replacement;
};

std::string apply_rules(const std::vector<Rule>& rules, const std::string& name) {
  for (const Rule& r : rules) {
    std::smatch match;
    if (std::regex_match(name, match, r.pattern)) return match.format(r.replacement);
  }
  return "";
}

const std::vector<Rule>& torchvision_rules() {
  static const std::vector<Rule> rules = [] {
    const std::string layer = R"(encoder\.layers\.encoder_layer_(\d+)\.)";
    std::vector<std::pair<std::string, std::string>> text = {
        {R"(conv_proj\.(weight|bias))", "patch_embed.$1"},
        {R"(class_token)", "embed.class_token"},
        {R"(encoder\.pos_embedding)", "embed.pos_embedding"},
        {layer + R"(ln_1\.(weight|bias))", "block$1_ln1.$2"},
        {layer + R"(self_attention\.in_proj_(weight|bias))", "block$1_attn.in_proj_$2"},
        {layer + R"(self_attention\.out_proj\.(weight|bias))", "block$1_attn.out_proj_$2"},
        {layer + R"(ln_2\.(weight|bias))", "block$1_ln2.$2"},
        {layer + R"(mlp\.(?:0|linear_1)\.(weight|bias))", "block$1_fc1.$2"},
        {layer + R"(mlp\.(?:3|linear_2)\.(weight|bias))", "block$1_fc2.$2"},
        {R"(encoder\.ln\.(weight|bias))", "ln.$1"},
        {R"(heads\.head\.(weight|bias))", "head.$1"},
    };
    std::vector<Rule> out;
    for (auto& [p, r] : text) out.push_back({std::regex(p), r});
    return out;
  }();
  return rules;
}

const std::vector<Rule>& timm_rules() {
  static const std::vector<Rule> rules = [] {
    const std::string block = R"(blocks\.(\d+)\.)";
    std::vector<std::pair<std::string, std::string>> text = {
        {R"(patch_embed\.proj\.(weight|bias))", "patch_embed.$1"},
        {R"(cls_token)", "embed.class_token"},
        {R"(pos_embed)", "embed.pos_embedding"},
        {block + R"(norm1\.(weight|bias))", "block$1_ln1.$2"},
        {block + R"(attn\.qkv\.(weight|bias))", "block$1_attn.in_proj_$2"},
        {block + R"(attn\.proj\.(weight|bias))", "block$1_attn.out_proj_$2"},
        {block + R"(norm2\.(weight|bias))", "block$1_ln2.$2"},
        {block + R"(mlp\.fc1\.(weight|bias))", "block$1_fc1.$2"},
        {block + R"(mlp\.fc2\.(weight|bias))", "block$1_fc2.$2"},
        {R"(norm\.(weight|bias))", "ln.$1"},
        {R"(head\.(weight|bias))", "head.$1"},
    };
    std::vector<Rule> out;
    for (auto& [p, r] : text) out.push_back({std::regex(p), r});
    return out;
  }();
  return rules;
}

}  // namespace

std::string torchvision_vit_name(const std::string& file_name) { return apply_rules(torchvision_rules(), file_name); }

std::string timm_vit_name(const std::string& file_name) { return apply_rules(timm_rules(), file_name); }

NameMap map_by_name(const std::vector<FileTensor>& tensors, std::string (*rename)(const std::string&)) {
  NameMap m;
  for (const FileTensor& t : tensors) {
    const std::string net_name = rename(t.name);
    if (net_name.empty()) {
      m.unmapped.push_back(t.name);
    } else {
      m.routes.push_back({t.name, net_name});
    }
  }
  return m;
}

}  // namespace strata::transfer
