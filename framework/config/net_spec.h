// From a net config to the list of LayerSpecs a Net builds, for one phase:
// generic key checks, include/exclude filtering, legacy `input:` fields, and
// automatic Split insertion where one blob feeds several layers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layer.h"

namespace strata {

// Caffe's NetState: what a net is built for. Layers are selected by their
// include/exclude rules (Caffe's NetStateRule: phase, min_level, max_level,
// stage, not_stage) against it, exactly as Caffe's Net::StateMeetsRule does.
struct NetState {
  Phase phase = Phase::kTrain;
  int64_t level = 0;
  std::vector<std::string> stages;
};

// A `state { }`, `train_state { }` or `test_state { }` block as written:
// fields not given stay unset, so that merging follows protobuf's MergeFrom
// as Caffe's Solver uses it (a phase or level given replaces the one
// before; stages add up).
struct NetStateSpec {
  std::optional<Phase> phase;
  std::optional<int64_t> level;
  std::vector<std::string> stages;
};
// Reads a state block (keys phase, level, stage); `context` names it in errors.
NetStateSpec parse_net_state(const ConfigNode& block, const std::string& context);
void merge_net_state(NetState& state, const NetStateSpec& spec);

// Parses and checks one `layer { }` block: generic keys here, the layer's
// own param blocks against its registered schema.
LayerSpec parse_layer_spec(const ConfigNode& block);

// True when the layer's include/exclude rules keep it in `state`: with no
// include rule a layer is in unless an exclude rule matches; with include
// rules it is in when one of them matches. A rule matches when every field it
// gives holds: its phase, level >= min_level, level <= max_level, every
// `stage` among the state's stages and no `not_stage` among them.
bool layer_in_state(const ConfigNode& block, const NetState& state);
// layer_in_state with level 0 and no stages.
bool layer_in_phase(const ConfigNode& block, Phase phase);

// All layers of the net in `state`, with Input layers for legacy `input:`
// declarations first and Split layers inserted after producers whose top
// is read by more than one layer. `state` is used as given: the net file's
// own `state { }` block is merged in by net_state_of() below.
std::vector<LayerSpec> net_layer_specs(const ConfigNode& root, const NetState& state);
// net_layer_specs for `phase`, with the net file's own state block.
std::vector<LayerSpec> net_layer_specs(const ConfigNode& root, Phase phase);

// The state a net is built in, as Caffe's Solver makes it: `phase`, then the
// net file's own `state { }` block, then `solver_state` (train_state or
// test_state) merged over it.
NetState net_state_of(const ConfigNode& root, Phase phase, const NetStateSpec& solver_state = {});

}  // namespace strata
