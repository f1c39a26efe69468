#include "parallel/estimate/grid_cost.h"

#include <algorithm>

#include "framework/error.h"
#include "parallel/estimate/collectives_cost.h"
#include "parallel/estimate/pipeline_cost.h"
#include "parallel/estimate/tensor_parallel_cost.h"

namespace strata::estimate {

std::vector<parallel::GridShape> grid_layouts(const StepProfile& profile, int workers) {
  STRATA_CHECK(workers >= 1, "workers must be >= 1, got ", workers);
  const int layers = static_cast<int>(profile.layers.size());
  const int max_tp = has_split_layers(profile) ? workers : 1;
  std::vector<parallel::GridShape> out;
  for (int tp = 1; tp <= max_tp; ++tp) {
    if (workers % tp != 0) continue;
    for (int pp = 1; pp <= std::min(layers, workers / tp); ++pp) {
      if ((workers / tp) % pp != 0) continue;
      out.push_back({workers / (tp * pp), pp, tp});
    }
  }
  return out;
}

namespace {
// The links each axis of `shape` uses on servers of `nodes` (grid_cost.h).
struct AxisLinks {
  Link tp, pp, dp;
  NodeTopology dp_nodes;  // given when a dp group has several ranks per server
};

AxisLinks axis_links(const parallel::GridShape& shape, const Link& link, const NodeTopology& nodes) {
  AxisLinks a{link, link, link, {}};
  if (!nodes.given()) return a;
  const int g = nodes.devices_per_node;
  const int per_pipeline = shape.tp * shape.pp;
  if (shape.world() <= g) return {nodes.intra, nodes.intra, nodes.intra, {}};  // the whole grid in one server
  if (g % shape.tp == 0) a.tp = nodes.intra;
  if (g % per_pipeline == 0) a.pp = nodes.intra;
  // Every device of a server takes part in some dp group's network phase at once.
  a.dp.bandwidth = link.bandwidth * std::min(nodes.nics_per_node, g) / g;
  if (g % per_pipeline == 0 && g / per_pipeline > 1) {
    // G / (tp x pp) ranks of each dp group per server: hierarchical, the
    // group's devices of a server sharing their own part of the adapters.
    a.dp_nodes = nodes;
    a.dp_nodes.devices_per_node = g / per_pipeline;
    a.dp_nodes.nics_per_node = 1;
    a.dp.bandwidth *= a.dp_nodes.devices_per_node;
  }
  return a;
}
}  // namespace

std::string layout_name(const GridEstimate& g) {
  return g.shape.str() +
         (g.shard == parallel::ShardStage::kNone ? "" : std::string(", shard ") + parallel::shard_stage_name(g.shard));
}

GridEstimate grid_step(const StepProfile& profile, const parallel::GridShape& shape, const Link& link,
                       const GridOptions& options, parallel::ShardStage shard) {
  STRATA_CHECK(shape.dp >= 1 && shape.pp >= 1 && shape.tp >= 1, "bad grid ", shape.str());
  const bool sharded = shard != parallel::ShardStage::kNone;
  GridEstimate g;
  g.shape = shape;
  g.shard = shard;
  const AxisLinks links = axis_links(shape, link, options.data.nodes);
  const StepProfile rank = tensor_parallel_rank_profile(profile, shape.tp, links.tp);
  const int m = shape.pp > 1 ? options.micro_batches : 1;
  const StepEstimate pipe = pipeline_step(rank, shape.pp, m, links.pp);
  if (!pipe.feasible) {
    g.step = infeasible(shape.world(), pipe.note);
    return g;
  }
  const std::vector<int> stage_of = pipeline_stage_of(rank, shape.pp);
  g.memory = largest_stage_memory(rank, stage_of, m, options.memory);
  double weight_gathers = 0.0;       // sharded: the weights' allgathers' exposed time, per step
  double weight_gathers_busy = 0.0;  // and their time on the wire
  if (sharded && shape.dp > 1) {
    // Each stage (this tp rank's part of it) is sliced over its dp group;
    // the device that needs the most decides, the slowest gather shows.
    const double n = shape.dp;
    for (int s = 0; s < shape.pp; ++s) {
      StepProfile part;
      part.batch = rank.batch;
      for (size_t i = 0; i < rank.layers.size(); ++i) {
        if (stage_of[i] == s) part.layers.push_back(rank.layers[i]);
      }
      DeviceMemory mem = stage_memory(rank, stage_of, s, m, options.memory);
      mem.optimizer /= n;
      double weight_bytes = 0.0, largest_layer = 0.0;
      for (const LayerProfile& l : part.layers) {
        weight_bytes += l.grad_bytes;  // the updated weights: what the buckets slice
        largest_layer = std::max(largest_layer, l.param_bytes);
      }
      // The gradients as the runtime keeps them (parallel/data_parallel/
      // gradient_slots.h): bucket slots (every bucket's with OPTIMIZER, and
      // with several micro-batches, whose gradients add up; else two used
      // in turn, each as large as the largest bucket it serves) and the
      // reduced slice; but for PARAMETERS, the slice's weights that the
      // optimizer updates beside the whole ones.
      double slots = weight_bytes;
      if (shard != parallel::ShardStage::kOptimizer && m == 1) {
        double turn[2] = {0.0, 0.0};
        const std::vector<GradientBucket> buckets = gradient_buckets(part, options.data.bucket_bytes);
        for (size_t b = 0; b < buckets.size(); ++b) turn[b % 2] = std::max(turn[b % 2], buckets[b].bytes);
        slots = std::min(weight_bytes, turn[0] + turn[1]);
      }
      mem.gradients = mem.gradients - weight_bytes + slots + weight_bytes / n;
      const double gather = ring_allgather_seconds(shape.dp, weight_bytes, links.dp);
      if (shard == parallel::ShardStage::kParameters) {
        // Gathered for each micro-batch's forward and backward, prefetched
        // behind that pass's compute on the stage; what does not fit shows.
        const double forward = part.forward_seconds() / m, backward = part.backward_seconds() / m;
        weight_gathers_busy = std::max(weight_gathers_busy, 2.0 * m * gather);
        weight_gathers = std::max(weight_gathers, m * (std::max(0.0, gather - forward) +
                                                       std::max(0.0, gather - backward)));
        mem.weights = mem.weights - weight_bytes + weight_bytes / n + largest_layer;
      } else {
        mem.weights += weight_bytes / n;
        weight_gathers_busy = std::max(weight_gathers_busy, gather);
        weight_gathers = std::max(weight_gathers, gather);  // after the update: nothing to hide behind
      }
      if (s == 0 || mem.total() > g.memory.total()) g.memory = mem;
    }
  }

  double dp_exposed = 0.0, dp_busy = 0.0;
  DataParallelOptions dp_options = options.data;
  dp_options.nodes = links.dp_nodes;
  dp_options.reduce_scatter = sharded;
  if (shape.dp > 1) {
    for (int s = 0; s < shape.pp; ++s) {
      // The stage's last micro-batch: its backward is what the buckets overlap.
      StepProfile last;
      last.batch = profile.batch;
      for (size_t i = 0; i < rank.layers.size(); ++i) {
        if (stage_of[i] != s) continue;
        LayerProfile l = rank.layers[i];
        l.forward /= m;
        l.backward /= m;
        last.layers.push_back(l);
      }
      const StepEstimate d = data_parallel_step(last, shape.dp, links.dp, dp_options);
      dp_exposed = std::max(dp_exposed, d.exposed);
      dp_busy = std::max(dp_busy, d.communication);
    }
  }
  double tp_busy = 0.0;
  for (const LayerProfile& l : profile.layers) tp_busy += tensor_parallel_layer_seconds(l, shape.tp, links.tp);

  StepEstimate& e = g.step;
  e.workers = shape.world();
  e.samples = static_cast<double>(shape.dp) * profile.batch;
  e.step = pipe.step + dp_exposed + weight_gathers;
  e.communication = tp_busy + pipe.communication + dp_busy + weight_gathers_busy;
  // Beyond a perfect split of one batch's work over the pp x tp devices of a pipeline.
  e.exposed = std::max(0.0, e.step - profile.compute_seconds() / (shape.pp * shape.tp));
  return g;
}

GridRanking rank_grid(const StepProfile& profile, int workers, const Link& link, const GridOptions& options,
                      double memory_per_device) {
  STRATA_CHECK(memory_per_device >= 0, "memory per device must be >= 0 (0: no limit)");
  GridRanking r;
  for (const parallel::GridShape& shape : grid_layouts(profile, workers)) {
    for (const parallel::ShardStage shard : options.shards) {
      const bool sharded = shard != parallel::ShardStage::kNone;
      if (sharded && shape.dp == 1) continue;  // sharding slices over the dp axis
      const GridEstimate g = grid_step(profile, shape, link, options, shard);
      if (!g.step.feasible) continue;  // grid_layouts already keeps pp <= layers
      const bool fits = memory_per_device <= 0 || g.memory.total() <= memory_per_device;
      (fits ? r.fitting : r.too_big).push_back(g);
    }
  }
  std::stable_sort(r.fitting.begin(), r.fitting.end(), [](const GridEstimate& a, const GridEstimate& b) {
    if (a.step.throughput() != b.step.throughput()) return a.step.throughput() > b.step.throughput();
    return a.memory.total() < b.memory.total();
  });
  std::stable_sort(r.too_big.begin(), r.too_big.end(),
                   [](const GridEstimate& a, const GridEstimate& b) { return a.memory.total() < b.memory.total(); });
  return r;
}

}  // namespace strata::estimate
