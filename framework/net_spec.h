// From a net config to the list of LayerSpecs a Net builds, for one phase:
// generic key checks, include/exclude filtering, legacy `input:` fields, and
// automatic Split insertion where one blob feeds several layers.
#pragma once

#include <string>
#include <vector>

#include "framework/config.h"
#include "framework/layer.h"

namespace strata {

// Parses and checks one `layer { }` block: generic keys here, the layer's
// own param blocks against its registered schema.
LayerSpec parse_layer_spec(const ConfigNode& block);

// True when the layer's include/exclude rules keep it in `phase`.
bool layer_in_phase(const ConfigNode& block, Phase phase);

// All layers of the net in `phase`, with Input layers for legacy `input:`
// declarations first and Split layers inserted after producers whose top
// is read by more than one layer.
std::vector<LayerSpec> net_layer_specs(const ConfigNode& root, Phase phase);

}  // namespace strata
