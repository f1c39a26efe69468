// Automatic pipeline stages: contiguous cuts of the layer list that
// minimise the slowest stage.
//
// Costs per TRAIN-phase layer come from measure_layer_costs (build the
// whole net in this process, time forward+backward of each layer over a few
// iterations, and count its parameter and top bytes), or, when the whole net
// cannot be built here (a --max-memory cap too small for it), from
// model_layer_costs: a cost model from what each layer type declares, no
// allocation of the net.
#pragma once

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/net.h"

namespace strata::parallel {

struct LayerCost {
  std::string name;
  double seconds = 0.0;  // forward + backward per micro-batch (or model units)
  size_t bytes = 0;      // parameters + gradients + top activations
};

std::vector<LayerCost> measure_layer_costs(const ConfigNode& net_root, const std::string& base_dir, int iterations);
// The cost model used under a memory cap, from the layer types' schemas: a
// layer over weights (LayerWork::kWeights) or a normalisation costs 1, every
// other layer 0.05; bytes are 0. Crude: it balances the number of weight
// layers per stage. An unknown type is the registry's error.
std::vector<LayerCost> model_layer_costs(const ConfigNode& net_root);

// Per TRAIN-phase layer of `net_root`, built as `net`: the sum of `seconds`
// (one value per layer of the Net) over the Net's layers it owns (a Split
// layer counts with the layer before it), and its parameter, gradient and
// top bytes.
std::vector<LayerCost> costs_by_train_layer(const ConfigNode& net_root, const Net& net,
                                            const std::vector<double>& seconds);
// Per layer of `net`, forward and backward as its layer declares them at the
// Net's shapes (Layer::forward_cost; backward counted as twice forward):
// max(FLOPs / 1e11, bytes / 1e10) seconds, a roofline of a CPU core's
// order, so a layer over few weights and large activations weighs by its
// memory traffic. Relative units: what a cut needs, not a prediction.
std::vector<double> declared_seconds(const Net& net);

// The stage of each layer: contiguous, non-decreasing, every stage non-empty,
// minimising the largest per-stage sum of seconds (ties: fewer bytes).
std::vector<int> balance_stages(const std::vector<LayerCost>& costs, int stages);

// "stage 0: data .. relu3 (9 layers) 41% of time, 12.0 MiB\n ..." and the
// balance (slowest stage / mean stage) under `label` ("predicted balance").
std::string describe_balance(const std::vector<LayerCost>& costs, const std::vector<int>& stage_of_layer, int stages,
                             const std::string& label = "predicted balance");

}  // namespace strata::parallel
