// Wiring of pipeline and tensor parallelism for `strata train`: the process
// grid, this rank's pipeline stage, the automatic stage balancer, and the
// start-of-run printout (grid table, stage plan, per-rank memory).
#pragma once

#include <memory>
#include <ostream>

#include "framework/communicator.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "parallel/rendezvous/env.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "parallel/model_parallel/pipeline.h"
#include "parallel/model_parallel/process_grid.h"

namespace strata::parallel {

struct ModelParallelRun {
  std::unique_ptr<ProcessGrid> grid;           // null when pp == tp == 1
  std::unique_ptr<Communicator> grad_comm;     // the pipeline's gradient channel (null over nccl)
  std::unique_ptr<PipelineParallel> pipe;      // null when pp == 1

  bool active() const { return grid != nullptr; }
  // The communicator data parallelism runs over (the grid's dp axis).
  Communicator* dp_comm() const { return grid ? &grid->dp() : nullptr; }
};

// With pp == tp == 1 returns an inactive run and changes nothing. Otherwise
// builds the grid over `world` (rank 0 prints its table to `out`), points
// solver_options at the grid (rank/world = dp position, comm = tp group),
// and with pp > 1 builds this rank's stage: stages from the net's `stage:`
// keys, or else from the balancer (pipeline_balance.h) run on rank 0 and
// broadcast. Rank 0 prints the plan; every rank prints its memory.
ModelParallelRun start_model_parallel(const SolverConfig& config, const ModelParallelConfig& mp,
                                      const RankEnv& env, Communicator* world, SolverOptions& solver_options,
                                      std::ostream& out);

// The net's memory for the start line under pipeline parallelism: every
// stage's (its nets, micro-batch slots included), gathered to rank 0 from
// the ranks at dp 0, tp 0: "stage 0: parameters ..., total 6.1 MiB; stage
// 1: ...; all stages 12.3 MiB". Every rank of `world`
// calls it; ranks other than 0 get "".
std::string pipeline_memory_summary(const ModelParallelRun& run, Communicator& world);

// "rank 1 (dp 0, pp 1, tp 0) memory: params 1.2 MiB, grads 1.2 MiB, optimizer state 1.2 MiB,
//  activations 3.4 MiB (2 micro-batch slots)"
std::string pipeline_memory_line(int world_rank, const ProcessGrid& grid, PipelineParallel& pipe);

}  // namespace strata::parallel
