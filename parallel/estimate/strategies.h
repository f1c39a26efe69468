// The strategies `strata estimate` compares, by name, and one entry point
// that predicts a step of any of them for a number of workers.
#pragma once

#include <string>
#include <vector>

#include "parallel/estimate/data_parallel_cost.h"
#include "parallel/estimate/link.h"
#include "parallel/estimate/step_estimate.h"

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
};

const char* strategy_name(Strategy s);
// Every strategy, in table order.
const std::vector<Strategy>& all_strategies();
// "dp-ring,ps-central,..." to strategies; "ps-central" means its worst and
// best arrangements. ConfigError naming the nearest for an unknown name.
std::vector<Strategy> parse_strategies(const std::string& list);

StepEstimate estimate_step(Strategy s, const StepProfile& profile, int workers, const Link& link,
                           const StrategyOptions& options);

}  // namespace strata::estimate
