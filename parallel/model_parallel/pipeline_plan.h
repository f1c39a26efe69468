// Which layers of a net run on which pipeline stage, and which blobs cross
// between stages; the net configs each stage builds (only its own layers).
//
// Stages come from `stage: k` on `layer { }` blocks (a layer without one
// takes the stage of the layer before it; the first defaults to 0), or from
// a list given by the automatic balancer (pipeline_balance.h). Stages must
// not decrease along the layer order, and every stage needs a layer.
//
// Boundaries: a layer on stage j that reads a blob whose last writer before
// it is on stage i < j makes the blob a boundary i -> j, sent directly from
// i to j (labels from a data layer on stage 0 go straight to the last stage).
// Its gradient comes back j -> i unless nothing on stage i needs it (the
// sender decides at setup, e.g. none for labels).
//
// A stage's compute net: one Input layer for the blobs it receives
// ("pipeline_recv"), Input layers in place of its data layers
// ("pipeline_data/<layer>", fed from the stage's feeder net, which holds the
// data layers themselves), then its other layers, with force_backward so
// that received blobs get gradients. Layers are padded with empty Input
// layers ("pipeline_pad/<k>") so that each keeps its index of the whole net:
// the Net seeds each layer from its index, so a stage initialises its weights
// (and a data layer shuffles) exactly as the unsplit net would.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/layer.h"
#include "framework/tensor.h"

namespace strata::parallel {

struct PipelineLayer {
  std::string name;
  std::string type;
  std::vector<std::string> bottoms, tops;
  int stage = 0;
  bool source = false;  // no bottoms: a data (or Input) layer, run by the feeder net
  int child = -1;  // index of its block among the plan root's children
};

struct PipelineBoundary {
  std::string blob;
  int from = 0, to = 0;
  std::string writer;  // the layer on stage `from` that last writes the blob
  // Known after setup (exchanged between the two stages):
  Shape shape;               // one micro-batch
  bool carries_grad = true;  // the sender needs the gradient back
};

struct PipelinePlan {
  int stages = 1;
  Phase phase = Phase::kTrain;          // the phase whose layers are planned
  ConfigNode root;                      // the net config (layers of `phase` only are used)
  std::vector<PipelineLayer> layers;    // layers of `phase` in order
  std::vector<PipelineBoundary> boundaries;  // in order of first use

  std::vector<int> incoming(int stage) const;  // boundary indices with to == stage
  std::vector<int> outgoing(int stage) const;  // boundary indices with from == stage
  std::vector<int> sources(int stage) const;   // layer indices of the stage's source layers
  // "stage 0: data .. relu2 (6 layers)\n..." plus the boundaries.
  std::string describe() const;
};

// How a net config's layers get their stages.
// stage_of_layer: one entry per TRAIN-phase layer (the balancer's cut), or
// empty to read the `stage:` keys. ConfigError names the offending layer.
PipelinePlan plan_pipeline(const ConfigNode& net_root, int stages, const std::vector<int>& stage_of_layer = {},
                           Phase phase = Phase::kTrain);

// The TEST-phase plan of a net config whose TRAIN phase is planned as
// `train`: a TEST layer takes its `stage:` key, else the stage of the TRAIN
// layer of the same name, else that of the TEST layer before it.
PipelinePlan plan_test_pipeline(const ConfigNode& test_root, const PipelinePlan& train);

// True when some TRAIN-phase layer has a `stage:` key.
bool has_stage_keys(const ConfigNode& net_root);

// The net config of `stage`'s compute net (TRAIN: with force_backward; TEST:
// forward only). `shapes`: the shape of every
// blob the stage gets from outside (received boundaries and its feeder's
// tops), by blob name.
ConfigNode stage_compute_config(const PipelinePlan& plan, int stage, const std::map<std::string, Shape>& shapes);
// The net config of `stage`'s feeder net (its source layers only); call only
// when plan.sources(stage) is not empty.
ConfigNode stage_feeder_config(const PipelinePlan& plan, int stage);

// The TRAIN-phase layer blocks of a net config, in order (for the balancer).
std::vector<std::string> train_layer_names(const ConfigNode& net_root);

}  // namespace strata::parallel
