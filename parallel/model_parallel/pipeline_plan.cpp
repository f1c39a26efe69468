#include "parallel/model_parallel/pipeline_plan.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "framework/error.h"
#include "framework/config/net_spec.h"

namespace strata::parallel {

namespace {

ConfigNode scalar(const std::string& key, const std::string& text, bool quoted, const SourceLocation& loc) {
  return ConfigNode::scalar(key, text, quoted, loc);
}

// An Input layer block with one shape per top.
ConfigNode input_layer(const std::string& name, const std::vector<std::string>& tops,
                       const std::vector<Shape>& shapes, const SourceLocation& loc) {
  ConfigNode layer = ConfigNode::block("layer", loc);
  layer.add_child(scalar("name", name, true, loc));
  layer.add_child(scalar("type", "Input", true, loc));
  for (const auto& t : tops) layer.add_child(scalar("top", t, true, loc));
  ConfigNode param = ConfigNode::block("input_param", loc);
  for (const Shape& s : shapes) {
    ConfigNode shape = ConfigNode::block("shape", loc);
    for (int64_t d : s) shape.add_child(scalar("dim", std::to_string(d), false, loc));
    param.add_child(std::move(shape));
  }
  layer.add_child(std::move(param));
  return layer;
}

// The block without its `stage` key (the compute nets do not need it).
ConfigNode without_stage(const ConfigNode& block) {
  ConfigNode out = ConfigNode::block(block.key(), block.loc());
  for (const ConfigNode& c : block.children()) {
    if (c.key() != "stage") out.add_child(c);
  }
  return out;
}

// The net root with its non-layer keys (name, ...) and no layers.
ConfigNode empty_root(const ConfigNode& root) {
  ConfigNode out = ConfigNode::block("", root.loc());
  for (const ConfigNode& c : root.children()) {
    if (c.key() == "name") out.add_child(c);
  }
  return out;
}

// Inserts empty Input layers so that every layer of `root` named in
// `full_index` sits at that index of the net's layer list (Split layers
// the Net inserts count). A layer already past its index would stay where it
// is, with another seed than in the whole net; stage_compute_config gives a
// stage one Input layer in front so that this does not happen.
ConfigNode pad_to_full_indices(const ConfigNode& root, const std::map<std::string, int>& full_index, Phase phase) {
  const std::vector<LayerSpec> specs = net_layer_specs(root, phase);
  std::map<std::string, int> pads_before;  // layer name -> pads to insert before its block
  int pad = 0;
  for (int c = 0; c < static_cast<int>(specs.size()); ++c) {
    auto it = full_index.find(specs[c].name);
    if (it == full_index.end()) continue;
    const int need = it->second - (c + pad);
    if (need > 0) {
      pads_before[specs[c].name] = need;
      pad += need;
    }
  }
  ConfigNode out = ConfigNode::block("", root.loc());
  int k = 0;
  for (const ConfigNode& c : root.children()) {
    if (c.key() == "layer") {
      const ConfigNode* n = c.find("name");
      auto it = n ? pads_before.find(n->text()) : pads_before.end();
      if (it != pads_before.end()) {
        for (int i = 0; i < it->second; ++i, ++k) {
          const std::string name = "pipeline_pad/" + std::to_string(k);
          out.add_child(input_layer(name, {name}, {Shape{0}}, c.loc()));
        }
      }
    }
    out.add_child(c);
  }
  return out;
}

std::map<std::string, int> full_indices(const ConfigNode& root, Phase phase) {
  std::map<std::string, int> out;
  const std::vector<LayerSpec> specs = net_layer_specs(root, phase);
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) out[specs[i].name] = i;
  return out;
}

}  // namespace

std::vector<std::string> train_layer_names(const ConfigNode& net_root) {
  std::vector<std::string> names;
  for (const ConfigNode& c : net_root.children()) {
    if (c.key() != "layer" || !layer_in_phase(c, Phase::kTrain)) continue;
    names.push_back(c.get_string("name"));
  }
  return names;
}

bool has_stage_keys(const ConfigNode& net_root) {
  for (const ConfigNode& c : net_root.children()) {
    if (c.key() == "layer" && c.has("stage") && layer_in_phase(c, Phase::kTrain)) return true;
  }
  return false;
}

PipelinePlan plan_pipeline(const ConfigNode& net_root, int stages, const std::vector<int>& stage_of_layer,
                           Phase phase) {
  if (stages < 1) fail<ConfigError>("a pipeline needs at least 1 stage, got ", stages);
  if (!net_root.get_strings("input").empty()) {
    fail<ConfigError>("net input declared with top-level 'input:' at ", net_root.loc().str(),
                      ": a pipelined net declares its inputs with Input or data layers");
  }
  PipelinePlan plan;
  plan.stages = stages;
  plan.phase = phase;
  plan.root = net_root;
  const auto& children = plan.root.children();
  int prev = 0;
  for (int i = 0; i < static_cast<int>(children.size()); ++i) {
    const ConfigNode& c = children[i];
    if (c.key() != "layer" || !layer_in_phase(c, phase)) continue;
    PipelineLayer l;
    l.child = i;
    l.name = c.get_string("name");
    l.type = c.get_string("type");
    l.bottoms = c.get_strings("bottom");
    l.tops = c.get_strings("top");
    l.source = l.bottoms.empty();
    const size_t k = plan.layers.size();
    if (!stage_of_layer.empty()) {
      l.stage = k < stage_of_layer.size() ? stage_of_layer[k] : prev;
    } else {
      l.stage = static_cast<int>(c.get_int("stage", prev));
    }
    const std::string where = "layer '" + l.name + "' at " + c.loc().str();
    if (l.stage < 0 || l.stage >= stages) {
      fail<ConfigError>(where, ": stage ", l.stage, " is out of range; the pipeline has ", stages,
                        " stage(s) (0 to ", stages - 1, ")");
    }
    if (l.stage < prev) {
      fail<ConfigError>(where, ": stage ", l.stage, " comes after a layer on stage ", prev,
                        "; stages must not decrease along the layer order");
    }
    prev = l.stage;
    plan.layers.push_back(std::move(l));
  }
  if (!stage_of_layer.empty() && stage_of_layer.size() != plan.layers.size()) {
    fail<ConfigError>("the stage list has ", stage_of_layer.size(), " entries for ", plan.layers.size(), " ",
                      phase_name(phase), "-phase layers");
  }
  std::vector<int> count(static_cast<size_t>(stages), 0);
  for (const auto& l : plan.layers) ++count[static_cast<size_t>(l.stage)];
  for (int s = 0; s < stages; ++s) {
    if (count[static_cast<size_t>(s)] == 0) {
      fail<ConfigError>("pipeline stage ", s, " of ", stages, " has no ", phase_name(phase), "-phase layers (net at ",
                        net_root.loc().str(), "); give some layers `stage: ", s, "` or use fewer stages");
    }
  }
  // Boundaries, in order of first use.
  std::map<std::string, int> last_writer;  // blob -> layer index
  std::set<std::pair<std::string, int>> seen;  // (blob, to)
  for (int i = 0; i < static_cast<int>(plan.layers.size()); ++i) {
    const PipelineLayer& l = plan.layers[i];
    for (const auto& b : l.bottoms) {
      auto w = last_writer.find(b);
      if (w == last_writer.end()) continue;  // the Net reports it
      const PipelineLayer& writer = plan.layers[w->second];
      if (writer.stage == l.stage || !seen.insert({b, l.stage}).second) continue;
      PipelineBoundary pb;
      pb.blob = b;
      pb.from = writer.stage;
      pb.to = l.stage;
      pb.writer = writer.name;
      plan.boundaries.push_back(pb);
    }
    for (const auto& t : l.tops) last_writer[t] = i;
  }
  return plan;
}

std::vector<int> PipelinePlan::incoming(int stage) const {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(boundaries.size()); ++i) {
    if (boundaries[i].to == stage) out.push_back(i);
  }
  return out;
}

std::vector<int> PipelinePlan::outgoing(int stage) const {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(boundaries.size()); ++i) {
    if (boundaries[i].from == stage) out.push_back(i);
  }
  return out;
}

std::vector<int> PipelinePlan::sources(int stage) const {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    if (layers[i].stage == stage && layers[i].source) out.push_back(i);
  }
  return out;
}

std::string PipelinePlan::describe() const {
  std::ostringstream os;
  for (int s = 0; s < stages; ++s) {
    std::vector<std::string> names;
    for (const auto& l : layers) {
      if (l.stage == s) names.push_back(l.name);
    }
    os << "  stage " << s << ": " << names.front();
    if (names.size() > 1) os << " .. " << names.back();
    os << " (" << names.size() << " layer" << (names.size() == 1 ? "" : "s") << ")\n";
  }
  for (const auto& b : boundaries) {
    os << "  boundary '" << b.blob << "': stage " << b.from << " -> " << b.to;
    if (!b.shape.empty()) os << " " << shape_str(b.shape);
    os << (b.carries_grad ? "" : " (no gradient)") << "\n";
  }
  return os.str();
}

ConfigNode stage_compute_config(const PipelinePlan& plan, int stage, const std::map<std::string, Shape>& shapes) {
  const SourceLocation loc = plan.root.loc();
  ConfigNode root = empty_root(plan.root);
  if (plan.phase == Phase::kTrain) root.add_child(scalar("force_backward", "true", false, loc));
  auto shape_of = [&](const std::string& blob) {
    auto it = shapes.find(blob);
    STRATA_CHECK(it != shapes.end(), "pipeline stage ", stage, ": no shape for incoming blob '", blob, "'");
    return it->second;
  };
  // One Input layer for every incoming blob: the stage's first layer has at
  // least one layer of an earlier stage before it in the whole net, so the
  // padding below can always put each layer at its whole-net index (its
  // seed: the weights a stage initialises are the unsplit net's). One Input
  // per blob pushed a stage receiving two blobs (data and label, after a
  // stage of only the data layer) past the first layer's index.
  std::vector<std::string> incoming;
  std::vector<Shape> incoming_shapes;
  for (int b : plan.incoming(stage)) {
    incoming.push_back(plan.boundaries[b].blob);
    incoming_shapes.push_back(shape_of(incoming.back()));
  }
  if (!incoming.empty()) root.add_child(input_layer("pipeline_recv", incoming, incoming_shapes, loc));
  for (const auto& l : plan.layers) {
    if (l.stage != stage) continue;
    const ConfigNode& block = plan.root.children()[l.child];
    if (l.source) {
      std::vector<Shape> s;
      for (const auto& t : l.tops) s.push_back(shape_of(t));
      root.add_child(input_layer("pipeline_data/" + l.name, l.tops, s, block.loc()));
    } else {
      root.add_child(without_stage(block));
    }
  }
  // Recompute ranges go to the stage that holds them; one across a stage
  // edge cannot run (backward of part of a range) and is refused here.
  if (plan.phase == Phase::kTrain) {
    auto stage_of = [&](const ConfigNode& range, const std::string& key) {
      const std::string name = range.get_string(key);
      for (const auto& l : plan.layers) {
        if (l.name == name) return l.stage;
      }
      fail<ConfigError>("recompute { ", key, ": \"", name, "\" } at ", range.loc().str(), ": no TRAIN-phase layer '",
                        name, "' in the net");
    };
    for (const ConfigNode& c : plan.root.children()) {
      if (c.key() != "recompute") continue;
      const int from = stage_of(c, "from"), to = stage_of(c, "to");
      if (from != to) {
        fail<ConfigError>("recompute { from: \"", c.get_string("from"), "\" to: \"", c.get_string("to"), "\" } at ",
                          c.loc().str(), ": it starts on pipeline stage ", from, " and ends on stage ", to,
                          "; a range must stay inside one stage: split it at the stage edge");
      }
      if (from == stage) root.add_child(c);
    }
  }
  return pad_to_full_indices(root, full_indices(plan.root, plan.phase), plan.phase);
}

ConfigNode stage_feeder_config(const PipelinePlan& plan, int stage) {
  ConfigNode root = empty_root(plan.root);
  for (int i : plan.sources(stage)) root.add_child(without_stage(plan.root.children()[plan.layers[i].child]));
  return pad_to_full_indices(root, full_indices(plan.root, plan.phase), plan.phase);
}

PipelinePlan plan_test_pipeline(const ConfigNode& test_root, const PipelinePlan& train) {
  std::map<std::string, int> train_stage;
  for (const auto& l : train.layers) train_stage[l.name] = l.stage;
  std::vector<int> stage_of_layer;
  int prev = 0;
  for (const ConfigNode& c : test_root.children()) {
    if (c.key() != "layer" || !layer_in_phase(c, Phase::kTest)) continue;
    auto it = train_stage.find(c.get_string("name"));
    int s = it != train_stage.end() ? it->second : prev;
    if (c.has("stage")) s = static_cast<int>(c.get_int("stage", s));
    stage_of_layer.push_back(s);
    prev = s;
  }
  return plan_pipeline(test_root, train.stages, stage_of_layer, Phase::kTest);
}

}  // namespace strata::parallel
