// The strategies `strata estimate` compares, by name, and one entry point
// that predicts a step of any of them for a number of workers.
#pragma once

#include <string>
#include <vector>

#include "parallel/estimate/data_parallel_cost.h"
#include "parallel/estimate/link.h"
#include "parallel/estimate/step_estimate.h"
#include "parallel/model_parallel/model_parallel_config.h"

namespace strata::estimate {

enum class Strategy {
  kDpRing,          // data parallel, ring allreduce, buckets overlapping backward
  kDpTree,          // the same with tree allreduce
  kDpNoOverlap,     // data parallel, one ring allreduce after backward
  kPsCentralWorst,  // one parameter server, all workers at once
  kPsCentralBest,   // one parameter server, exchanges staggered
  kPsSharded,       // K parameter-server shards
  kPipeline,        // one stage per worker
  kTensor,          // tensor parallel over all workers
};

struct StrategyOptions {
  DataParallelOptions data;  // bucket size and wire bytes; algorithm and overlap are set per strategy
  int shards = 0;            // ps-sharded: servers; 0 = one per worker
  int micro_batches = 8;     // pipeline
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::kOneFOneB;  // pipeline on shared cores
  // Workers are processes of one thread sharing this many cores of one
  // host; 0: a device each. Compute slows by workers / host_cores beyond
  // host_cores workers (rounded up: see on_shared_cores), except a
  // pipeline's, whose schedule is simulated (pipeline_step_on_cores:
  // stages idle in the bubble leave their core).
  int host_cores = 0;
};

// The profile with every layer's compute slowed by ceil(workers / cores)
// when more workers than cores share them (unchanged for cores 0): the
// scheduler keeps each process on its core within a step of a few
// milliseconds, so some core runs ceil(workers / cores) of them, and a
// synchronous step waits for the slowest. (A fair share, workers / cores,
// predicted 3 ranks on 2 cores 34-43% too fast, and could not show what
// was measured: 4 ranks on 2 cores faster than 3.)
StepProfile on_shared_cores(const StepProfile& profile, int workers, int cores);

const char* strategy_name(Strategy s);
// Every strategy, in table order.
const std::vector<Strategy>& all_strategies();
// "dp-ring,ps-central,..." to strategies; "ps-central" means its worst and
// best arrangements. ConfigError naming the nearest for an unknown name.
std::vector<Strategy> parse_strategies(const std::string& list);

StepEstimate estimate_step(Strategy s, const StepProfile& profile, int workers, const Link& link,
                           const StrategyOptions& options);

}  // namespace strata::estimate
