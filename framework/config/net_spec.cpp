#include "framework/config/net_spec.h"

#include <algorithm>
#include <map>
#include <cstdio>
#include <mutex>
#include <set>

#include "framework/config/config_problems.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/caffe/net_upgrade.h"

namespace strata {

const std::vector<std::string>& net_keys() {
  // preset: the image transform the net's input expects (read by `strata embed`).
  // state: Caffe's NetState (phase, level, stage) the file asks for.
  // recompute: a range of layers recomputed in backward (framework/net.h).
  static const std::vector<std::string> keys = {"name",      "layer",          "input",  "input_shape",
                                                "input_dim", "force_backward", "preset", "state",
                                                "recompute"};
  return keys;
}

const std::vector<std::string>& layer_keys() {
  static const std::vector<std::string> keys = {"name",    "type",    "bottom",      "top",
                                                "param",   "include", "exclude",     "loss_weight",
                                                "propagate_down", "phase", "reinit",
                                                "stage"};  // stage: pipeline stage (parallel/model_parallel/pipeline_plan.h)
  return keys;
}

namespace {

std::string layer_context(const ConfigNode& block) {
  const ConfigNode* n = block.find("name");
  return n ? "layer '" + n->text() + "'" : "layer at " + block.loc().str();
}

// Caffe's Net::StateMeetsRule.
bool rule_matches(const ConfigNode& rule, const NetState& state, const std::string& context) {
  rule.check_keys({"phase", "min_level", "max_level", "stage", "not_stage"},
                  "include/exclude rule of " + context);
  if (rule.has("phase") && rule.get_enum("phase", {"TRAIN", "TEST"}, "TRAIN") != phase_name(state.phase)) {
    return false;
  }
  if (rule.has("min_level") && state.level < rule.get_int("min_level")) return false;
  if (rule.has("max_level") && state.level > rule.get_int("max_level")) return false;
  const auto has_stage = [&](const std::string& s) {
    return std::find(state.stages.begin(), state.stages.end(), s) != state.stages.end();
  };
  for (const std::string& s : rule.get_strings("stage")) {
    if (!has_stage(s)) return false;
  }
  for (const std::string& s : rule.get_strings("not_stage")) {
    if (has_stage(s)) return false;
  }
  return true;
}

}  // namespace

NetStateSpec parse_net_state(const ConfigNode& block, const std::string& context) {
  block.check_keys({"phase", "level", "stage"}, context);
  NetStateSpec spec;
  if (block.has("phase")) {
    spec.phase = block.get_enum("phase", {"TRAIN", "TEST"}, "TRAIN") == "TRAIN" ? Phase::kTrain : Phase::kTest;
  }
  if (block.has("level")) spec.level = block.get_int("level");
  spec.stages = block.get_strings("stage");
  return spec;
}

void merge_net_state(NetState& state, const NetStateSpec& spec) {
  if (spec.phase) state.phase = *spec.phase;
  if (spec.level) state.level = *spec.level;
  state.stages.insert(state.stages.end(), spec.stages.begin(), spec.stages.end());
}

NetState net_state_of(const ConfigNode& root, Phase phase, const NetStateSpec& solver_state) {
  NetState state;
  state.phase = phase;
  if (root.count("state") == 1) merge_net_state(state, parse_net_state(root.block("state"), "state of the net"));
  merge_net_state(state, solver_state);
  return state;
}

bool layer_in_phase(const ConfigNode& block, Phase phase) {
  NetState state;
  state.phase = phase;
  return layer_in_state(block, state);
}

bool layer_in_state(const ConfigNode& block, const NetState& state) {
  const std::string context = layer_context(block);
  const auto includes = block.all("include");
  const auto excludes = block.all("exclude");
  if (!includes.empty() && !excludes.empty()) {
    fail<ConfigError>(context, " at ", block.loc().str(),
                      ": give either include or exclude rules, not both");
  }
  if (block.has("phase")) {
    const std::string p = block.get_enum("phase", {"TRAIN", "TEST"}, "TRAIN");
    if (p != phase_name(state.phase)) return false;
  }
  if (!includes.empty()) {
    for (const ConfigNode* r : includes) {
      if (rule_matches(*r, state, context)) return true;
    }
    return false;
  }
  for (const ConfigNode* r : excludes) {
    if (rule_matches(*r, state, context)) return false;
  }
  return true;
}

LayerSpec parse_layer_spec(const ConfigNode& block) {
  LayerSpec spec;
  spec.node = block;
  spec.type = block.get_string("type");
  spec.name = block.get_string("name", "");
  const std::string context = spec.name.empty() ? "layer at " + block.loc().str()
                                                : "layer '" + spec.name + "'";
  // Every problem of the block's keys at once (framework/config/config_problems.h).
  ConfigProblems problems;
  if (spec.name.empty()) problems.add(context + " has no name; add name: \"...\"");
  if (!LayerRegistry::instance().has(spec.type)) {
    try {
      LayerRegistry::instance().find(spec.type);
    } catch (const ConfigError& e) {
      problems.add(context + " at " + block.find("type")->loc().str() + ": " + e.what());
    }
    problems.throw_if_any(context);  // its keys depend on the type
  }
  const LayerRegistration& reg = LayerRegistry::instance().find(spec.type);
  const LayerSchema schema = reg.schema();

  std::vector<std::string> known = layer_keys();
  for (const auto& b : schema.blocks) known.push_back(b.block);
  problems.check([&] { block.check_keys(known, context + " (" + spec.type + ")"); });
  for (const auto& b : schema.blocks) {
    for (const ConfigNode* sub : block.all(b.block)) {
      problems.check([&] { sub->check_keys(b.keys, b.block + " of " + context); });
    }
    if (block.count(b.block) > 1) {
      problems.add(b.block + " given " + std::to_string(block.count(b.block)) + " times in " + context + " at " +
                   block.loc().str() + "; expected once");
    }
  }
  problems.throw_if_any(context);

  spec.bottoms = block.get_strings("bottom");
  spec.tops = block.get_strings("top");
  for (const ConfigNode* p : block.all("param")) {
    // share_mode (Caffe's STRICT/PERMISSIVE shape check of shared weights) is
    // accepted as written; shapes of shared weights must always match here.
    p->check_keys({"name", "lr_mult", "decay_mult", "share_mode"}, "param of " + context);
    p->get_enum("share_mode", {"STRICT", "PERMISSIVE"}, "STRICT");
    ParamSpec ps;
    ps.share_name = p->get_string("name", "");
    ps.lr_mult = static_cast<float>(p->get_double("lr_mult", 1.0));
    ps.decay_mult = static_cast<float>(p->get_double("decay_mult", 1.0));
    if (ps.lr_mult < 0 || ps.decay_mult < 0) {
      fail<ConfigError>("param of ", context, " at ", p->loc().str(),
                        ": lr_mult and decay_mult must be >= 0");
    }
    spec.params.push_back(ps);
  }
  for (double w : block.get_doubles("loss_weight")) spec.loss_weights.push_back(static_cast<float>(w));
  for (const ConfigNode* p : block.all("propagate_down")) spec.propagate_down.push_back(p->as_bool());
  if (!spec.propagate_down.empty() && spec.propagate_down.size() != spec.bottoms.size()) {
    fail<ConfigError>(context, " at ", block.loc().str(), ": ", spec.propagate_down.size(),
                      " propagate_down values for ", spec.bottoms.size(),
                      " bottoms; give one per bottom");
  }
  if (!spec.loss_weights.empty() && spec.loss_weights.size() != spec.tops.size()) {
    fail<ConfigError>(context, " at ", block.loc().str(), ": ", spec.loss_weights.size(),
                      " loss_weight values for ", spec.tops.size(), " tops; give one per top");
  }
  return spec;
}

namespace {

// Legacy Caffe deploy files declare inputs at the top level:
//   input: "data"  input_shape { dim: 1 dim: 3 dim: 224 dim: 224 }
// (or four input_dim values per input). They become one Input layer.
void add_legacy_inputs(const ConfigNode& root, std::vector<LayerSpec>& specs) {
  const auto inputs = root.get_strings("input");
  if (inputs.empty()) return;
  const auto shapes = root.all("input_shape");
  const auto dims = root.get_ints("input_dim");
  ConfigNode layer = ConfigNode::block("layer", root.loc());
  ConfigNode param = ConfigNode::block("input_param", root.loc());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ConfigNode shape = ConfigNode::block("shape", root.loc());
    if (i < shapes.size()) {
      for (int64_t d : shapes[i]->get_ints("dim")) {
        shape.add_child(ConfigNode::scalar("dim", std::to_string(d), false, shapes[i]->loc()));
      }
    } else if (dims.size() == 4 * inputs.size()) {
      for (size_t k = 0; k < 4; ++k) {
        shape.add_child(ConfigNode::scalar("dim", std::to_string(dims[4 * i + k]), false, root.loc()));
      }
    } else {
      fail<ConfigError>("net input '", inputs[i], "' at ", root.loc().str(),
                        " has no input_shape; add input_shape { dim: ... } for each input");
    }
    param.add_child(std::move(shape));
  }
  layer.add_child(std::move(param));
  LayerSpec spec;
  spec.name = "input";
  spec.type = "Input";
  spec.tops = inputs;
  spec.node = std::move(layer);
  specs.push_back(std::move(spec));
}

// Inserts a Split layer after each producer whose top is read more than once,
// and points each reader at its own split output (Caffe's insert_splits).
// Takes `in` by value and moves each spec on: a spec holds its whole config
// block, and a net of many layers should not hold them twice.
std::vector<LayerSpec> insert_splits(std::vector<LayerSpec> in) {
  // (producer layer, top index) of the current version of each blob name.
  std::map<std::string, std::pair<int, int>> current;
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> readers;  // -> (layer, bottom)
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    for (int j = 0; j < static_cast<int>(in[i].bottoms.size()); ++j) {
      auto it = current.find(in[i].bottoms[j]);
      if (it != current.end()) readers[it->second].push_back({i, j});
    }
    for (int j = 0; j < static_cast<int>(in[i].tops.size()); ++j) current[in[i].tops[j]] = {i, j};
  }
  std::vector<LayerSpec> out;
  std::map<std::pair<int, int>, std::string> renamed;  // (layer, bottom) -> split top
  out.reserve(in.size());
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    out.push_back(std::move(in[i]));
    in[i] = LayerSpec();
    LayerSpec& spec = out.back();
    for (int j = 0; j < static_cast<int>(spec.bottoms.size()); ++j) {
      auto it = renamed.find({i, j});
      if (it == renamed.end()) continue;
      for (size_t t = 0; t < spec.tops.size(); ++t) {
        if (spec.tops[t] == spec.bottoms[j]) {
          fail<ConfigError>("blob '", spec.bottoms[j], "' is read by several layers and modified in place by layer '",
                            spec.name, "' at ", spec.node.loc().str(),
                            "; give that layer's top its own name");
        }
      }
      spec.bottoms[j] = it->second;
    }
    const int producer = static_cast<int>(out.size()) - 1;  // `spec` moves as splits are added
    for (int t = 0; t < static_cast<int>(out[producer].tops.size()); ++t) {
      auto r = readers.find({i, t});
      if (r == readers.end() || r->second.size() < 2) continue;
      const LayerSpec& p = out[producer];
      LayerSpec split;
      split.name = p.tops[t] + "_" + p.name + "_" + std::to_string(t) + "_split";
      split.type = "Split";
      split.bottoms = {p.tops[t]};
      split.node = ConfigNode::block("layer", p.node.loc());
      for (size_t k = 0; k < r->second.size(); ++k) {
        const std::string top = split.name + "_" + std::to_string(k);
        split.tops.push_back(top);
        renamed[r->second[k]] = top;
      }
      out.push_back(std::move(split));
    }
  }
  return out;
}

void note_duplicate_name(const ConfigNode& block, const std::string& name, const std::string& renamed) {
  static std::mutex mu;
  static std::set<std::string> seen;
  const std::string where = block.loc().str();
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(where).second) return;  // the same net built again (TRAIN and TEST, several nets)
  std::fprintf(stderr, "note: %s: a second layer named '%s'; it is called '%s' here (strata names parameters and "
               "snapshots by layer name)\n", where.c_str(), name.c_str(), renamed.c_str());
}

}  // namespace

std::vector<LayerSpec> net_layer_specs(const ConfigNode& root, Phase phase) {
  return net_layer_specs(root, net_state_of(root, phase));
}

std::vector<LayerSpec> net_layer_specs(const ConfigNode& given, const NetState& state) {
  // V1 files (`layers { type: CONVOLUTION }`) are read as their upgrade (net_upgrade.h).
  ConfigNode upgraded;
  const ConfigNode& root = is_v1_net(given) ? (upgraded = upgrade_v1_net(given)) : given;
  const std::string net_name = root.has("name") && !root.all("name")[0]->is_block()
                                   ? "net '" + root.all("name")[0]->text() + "'"
                                   : std::string("the net");
  ConfigProblems problems;
  problems.check([&] { root.check_keys(net_keys(), "net"); });
  // Checked here too, so a misspelt value fails whichever command reads the net.
  problems.check([&] { root.get_enum("preset", {"NONE", "IMAGENET", "VIT_EVAL"}, ""); });
  std::vector<LayerSpec> specs;
  problems.check([&] { add_legacy_inputs(root, specs); });
  std::set<std::string> names;
  std::set<std::string> own_names;  // every layer's own name, for renaming a duplicate out of their way
  for (const ConfigNode* block : root.all("layer")) {
    if (block->has("name") && !block->all("name")[0]->is_block()) own_names.insert(block->all("name")[0]->text());
  }
  for (const ConfigNode* block : root.all("layer")) {
    problems.check([&] {
      // The other phase's layers are parsed too: their keys are checked in every run.
      LayerSpec spec = parse_layer_spec(*block);
      if (!layer_in_state(*block, state)) return;
      if (!names.insert(spec.name).second) {
        // Caffe accepts two layers of one name (its own mnist_autoencoder has
        // two 'loss' layers); strata names parameters, snapshots and --layer
        // by layer name, so the later one gets a suffix, said once per file.
        std::string renamed;
        for (int k = 2; renamed.empty() || names.count(renamed) || own_names.count(renamed); ++k) {
          renamed = spec.name + "_" + std::to_string(k);
        }
        note_duplicate_name(*block, spec.name, renamed);
        spec.name = renamed;
        names.insert(renamed);
      }
      specs.push_back(std::move(spec));
    });
  }
  problems.throw_if_any(net_name + (root.loc().file ? " in " + *root.loc().file : std::string()));
  return insert_splits(std::move(specs));
}

}  // namespace strata
