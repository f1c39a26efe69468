#include "parallel/estimate/tensor_parallel_cost.h"

#include "framework/error.h"
#include "parallel/estimate/collectives_cost.h"

namespace strata::estimate {

double tensor_parallel_layer_seconds(const LayerProfile& layer, int ranks, const Link& link) {
  if (layer.split.empty() || ranks == 1) return 0.0;
  const double input_grad = ring_allreduce_seconds(ranks, layer.bottom_bytes, link);
  const double partial_sums = ring_allreduce_seconds(ranks, layer.top_bytes, link);
  if (layer.split == "COLUMN") return input_grad;
  if (layer.split == "ROW") return partial_sums;
  if (layer.split == "HEADS") return input_grad + partial_sums;
  if (layer.split == "OUTPUT_CHANNELS") return ring_allgather_seconds(ranks, layer.top_bytes, link) + input_grad;
  fail<ConfigError>("layer '", layer.name, "': unknown split '", layer.split,
                    "' (known: COLUMN, ROW, HEADS, OUTPUT_CHANNELS)");
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
