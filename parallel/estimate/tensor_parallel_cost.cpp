#include "parallel/estimate/tensor_parallel_cost.h"

#include "framework/error.h"
#include "parallel/estimate/collectives_cost.h"

namespace strata::estimate {

TensorParallelCollectives tensor_parallel_layer_collectives(const LayerProfile& layer, int ranks, const Link& link) {
  if (layer.split.empty() || ranks == 1) return {};
  const double input_grad = ring_allreduce_seconds(ranks, layer.bottom_bytes, link);
  const double partial_sums = ring_allreduce_seconds(ranks, layer.top_bytes, link);
  if (layer.split == "COLUMN") return {0.0, input_grad};
  if (layer.split == "ROW") return {partial_sums, 0.0};
  if (layer.split == "HEADS") return {partial_sums, input_grad};
  if (layer.split == "OUTPUT_CHANNELS") return {ring_allgather_seconds(ranks, layer.top_bytes, link), input_grad};
  fail<ConfigError>("layer '", layer.name, "': unknown split '", layer.split,
                    "' (known: COLUMN, ROW, HEADS, OUTPUT_CHANNELS)");
}

double tensor_parallel_layer_seconds(const LayerProfile& layer, int ranks, const Link& link) {
  return tensor_parallel_layer_collectives(layer, ranks, link).total();
}

StepProfile tensor_parallel_rank_profile(const StepProfile& profile, int ranks, const Link& link) {
  STRATA_CHECK(ranks >= 1, "ranks must be >= 1, got ", ranks);
  StepProfile rank = profile;
  if (ranks == 1) return rank;
  for (LayerProfile& l : rank.layers) {
    if (l.split.empty()) continue;
    const TensorParallelCollectives c = tensor_parallel_layer_collectives(l, ranks, link);
    l.forward = l.forward / ranks + c.forward;
    l.backward = l.backward / ranks + c.backward;
    l.grad_bytes /= ranks;
    l.param_bytes /= ranks;
    if (l.split == "COLUMN") {
      // Its top is the rank's slice of the outputs; the others end whole
      // (a ROW or HEADS allreduce, an OUTPUT_CHANNELS allgather).
      l.top_bytes /= ranks;
      l.activation_bytes /= ranks;
    }
  }
  return rank;
}

StepEstimate tensor_parallel_step(const StepProfile& profile, int ranks, const Link& link) {
  STRATA_CHECK(ranks >= 1, "ranks must be >= 1, got ", ranks);
  StepEstimate e;
  e.workers = ranks;
  e.samples = profile.batch;
  double compute = 0.0;
  for (const LayerProfile& l : profile.layers) {
    const double work = l.forward + l.backward;
    compute += l.split.empty() ? work : work / ranks;
    e.communication += tensor_parallel_layer_seconds(l, ranks, link);
  }
  e.step = compute + e.communication;
  e.exposed = e.communication;
  return e;
}

bool has_split_layers(const StepProfile& profile) {
  for (const LayerProfile& l : profile.layers) {
    if (!l.split.empty()) return true;
  }
  return false;
}

}  // namespace strata::estimate
