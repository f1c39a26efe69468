// Parameter initialisation from a filler block:
//   weight_filler { type: "xavier" }            (Caffe spelling, accepted as is)
// Types: constant (value), uniform (min, max), gaussian (mean, std),
// xavier / glorot (variance_norm: FAN_IN | FAN_OUT | AVERAGE), msra / kaiming (same).
// Fan-in is numel / shape[0], fan-out numel / shape[1], as in Caffe.
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/rng.h"
#include "framework/tensor.h"

namespace strata {

struct FillerSpec {
  std::string type = "constant";
  float value = 0.0f;
  float min = 0.0f, max = 1.0f;
  float mean = 0.0f, std = 1.0f;
  std::string variance_norm = "FAN_IN";
  // gaussian: Caffe's `sparse`: keep each weight with probability sparse /
  // num_outputs (dimension 0), zero the rest; < 0 keeps all.
  int sparse = -1;
};

// Reads a filler block; absent block -> `def`. Unknown keys and types are
// ConfigErrors naming `context` (e.g. "weight_filler of layer 'conv1'").
FillerSpec parse_filler(const ConfigNode& block, const FillerSpec& def, const std::string& context);
void fill(const FillerSpec& spec, Tensor& t, Rng& rng);
// What a layer's weight_filler is when the config gives none: xavier. (Caffe's
// default, constant 0, would leave every unit identical.) Biases default to 0.
FillerSpec default_weight_filler();

const std::vector<std::string>& filler_keys();
const std::vector<std::string>& filler_types();

}  // namespace strata
