// `strata estimate --grid`: every dp x pp x tp layout of each worker count,
// ranked by predicted throughput, with the memory each needs per device;
// those beyond --memory-per-device are listed apart as not fitting
// (parallel/estimate/grid_cost.h holds the model).
#pragma once

#include <string>
#include <vector>

#include "framework/solver/solver_config.h"
#include "parallel/estimate/grid_cost.h"
#include "parallel/estimate/link.h"
#include "parallel/estimate/strategies.h"
#include "tools/strata/args.h"

namespace strata::cli {

enum class GridMode { kOff, kOn };

struct GridFlags {
  GridMode mode = GridMode::kOff;
  double memory_per_device = 0.0;  // bytes; 0 = no limit
  estimate::MemoryOptions memory;  // optimizer slots and pipeline schedule
  std::string optimizer_note;      // where the optimizer slots come from, for the header
  // --shard: the shard stages dp-only layouts are ranked with; {NONE} by
  // default, or the solver's stage beside NONE.
  std::vector<parallel::ShardStage> shards = {parallel::ShardStage::kNone};
};

// --grid, --memory-per-device, --schedule, --shard and the solver's
// optimizer, schedule and shard stage, checked before any timing. ConfigError for a grid flag without
// --grid, or --grid with a flag of the strategy table (--strategy,
// --measured, --host-cores).
GridFlags parse_grid_flags(const Args& args, const SolverConfig* solver);

// Prints the ranked layouts of every worker count; with chart_path, writes
// the best fitting layout's speedup against workers as an SVG.
void print_grid_estimates(const GridFlags& flags, const estimate::StepProfile& profile, const estimate::Link& link,
                          const estimate::StrategyOptions& options, const std::vector<int>& workers,
                          const std::string& chart_path);

}  // namespace strata::cli
