// The dp x pp x tp grid (parallel/model_parallel/process_grid.h): N workers
// as dp copies of a pipeline of pp stages, each stage run by a
// tensor-parallel group of tp ranks. Each layout is predicted from the
// models of its parts, composed, not from formulas of its own:
//
//   rank profile  tensor_parallel_rank_profile(profile, tp): split layers
//                 take 1/tp of their time plus their collectives
//   pipeline      pipeline_step(rank profile, pp, m), m = the micro-batches
//                 when pp > 1, else 1 (no pipeline, no micro-batches)
//   data parallel each stage's dp group allreduces only that stage's
//                 gradients, in buckets that overlap the backward of the
//                 stage's last micro-batch (data_parallel_step on the stage's
//                 layers with 1/m of their times); the groups run at once,
//                 so the step waits for the most exposed one:
//
//   step = pipeline step + max over stages of the allreduce time that
//          backward did not hide
//
// A pipeline (and the tp group in it) processes one batch per step (strong
// scaling); the dp copies process one each (weak scaling): dp batches per
// step, compared, as every strategy, with one worker training alone.
//
// Servers (options.data.nodes given, G devices each): ranks are packed per
// server in the grid's order (tp fastest, then pp, then dp), so every axis
// uses the server's link when all the workers fit in one server; otherwise
//   tp group      inside a server when tp divides G: the server's link
//   pipeline      inside a server when tp x pp divides G, else --link
//                 (the cuts that cross servers set the slowest stage)
//   dp group      its ranks are tp x pp apart: G / (tp x pp) of them share a
//                 server when that divides G (a hierarchical allreduce with
//                 that many devices per server), one per server otherwise
//                 (a flat allreduce over the network); all the dp groups of
//                 a server run at once, so each device gets its share of the
//                 server's adapters, B x min(adapters, G) / G.
// The tp and pipeline traffic that crosses servers is not charged for the
// adapters it shares with the dp groups (an optimistic simplification).
//
// Memory: the device of the stage that needs the most (memory_cost.h), on
// the rank profile. Layouts are ranked by throughput; those that need more
// than the memory per device do not fit.
//
// Sharded data parallel (options.shards: layouts with dp > 1, each stage
// sliced over its dp group), as
// parallel/data_parallel/ does it: the buckets are reduce-scattered instead
// of allreduced, the device of the stage that needs the most decides, and
//   OPTIMIZER   each rank keeps 1/dp of the optimizer state, the reduced
//               slice of the gradients beside their whole buckets, and the
//               slice's weights beside the whole ones; after the update
//               one allgather of the weights (not overlapped)
//   GRADIENTS   as OPTIMIZER, the gradients in two bucket slots used in
//               turn (with several micro-batches, which add up, a slot per
//               bucket as OPTIMIZER)
//   PARAMETERS  the gradients as GRADIENTS; 1/dp of the weights, plus the largest layer's whole
//               (under a pipeline gathered for every micro-batch's passes)
//               weights gathered while it runs; no allgather after the
//               update, one in forward and one in backward, each gathered
//               a bucket ahead while the layers compute: hidden up to the
//               pass's compute time, what is left exposed; 1.5x the bytes
//               of an allreduce
#pragma once

#include <string>
#include <vector>

#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/estimate/data_parallel_cost.h"
#include "parallel/estimate/memory_cost.h"
#include "parallel/estimate/step_estimate.h"
#include "parallel/model_parallel/process_grid.h"

namespace strata::estimate {

struct GridOptions {
  DataParallelOptions data;  // bucket size, algorithm, overlap, wire bytes of the dp allreduce
  int micro_batches = 8;     // when pp > 1
  MemoryOptions memory;
  // The shard stages each layout with dp > 1 is ranked with (NONE: plain).
  std::vector<parallel::ShardStage> shards = {parallel::ShardStage::kNone};
};

struct GridEstimate {
  parallel::GridShape shape;
  parallel::ShardStage shard = parallel::ShardStage::kNone;
  StepEstimate step;    // workers = dp x pp x tp, samples = dp x batch
  DeviceMemory memory;  // the device that needs the most
};

// Every layout of `workers`: dp x pp x tp = workers with pp <= the layers,
// and tp > 1 only when the net has split layers (otherwise tp ranks would
// each run the whole net). Ordered by tp, then pp.
std::vector<parallel::GridShape> grid_layouts(const StepProfile& profile, int workers);

GridEstimate grid_step(const StepProfile& profile, const parallel::GridShape& shape, const Link& link,
                       const GridOptions& options,
                       parallel::ShardStage shard = parallel::ShardStage::kNone);
// "dp 4 x pp 1 x tp 1", with ", shard PARAMETERS" when sharded.
std::string layout_name(const GridEstimate& g);

struct GridRanking {
  std::vector<GridEstimate> fitting;  // best first (highest throughput; ties: less memory)
  std::vector<GridEstimate> too_big;  // need more than the memory per device, smallest first
};

// All layouts of `workers`, ranked; memory_per_device 0 means no limit.
GridRanking rank_grid(const StepProfile& profile, int workers, const Link& link, const GridOptions& options,
                      double memory_per_device);

}  // namespace strata::estimate
