#include "tools/strata/estimate_grid.h"

#include <algorithm>
#include <cstdio>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/memory_cap.h"
#include "framework/solver/optimizer.h"
#include "parallel/estimate/speedup_chart.h"
#include "parallel/estimate/step_estimate.h"
#include "parallel/estimate/tensor_parallel_cost.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "tools/strata/flag_lists.h"

namespace strata::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string bytes(double b) { return format_bytes(static_cast<size_t>(b)); }

// A shard column only when some stage besides NONE is ranked.
void print_row(int rank, const estimate::GridEstimate& g, const estimate::StepProfile& profile, bool shard_column) {
  const estimate::DeviceMemory& m = g.memory;
  std::printf("%4d %4d %4d %4d %12.4f %12.1f %9.2f %9.1f%% %11.2f %11.2f %11.2f %11.2f %11.2f", rank, g.shape.dp,
              g.shape.pp, g.shape.tp, g.step.step * 1e3, g.step.throughput(), estimate::speedup(g.step, profile),
              100 * estimate::efficiency(g.step, profile), m.weights / kMiB, m.gradients / kMiB, m.optimizer / kMiB,
              m.activations / kMiB, m.total() / kMiB);
  if (shard_column) std::printf(" %10s", parallel::shard_stage_name(g.shard));
  std::printf("\n");
}

std::string memory_detail(const estimate::DeviceMemory& m) {
  return "stage " + std::to_string(m.stage) + ": weights " + bytes(m.weights) + ", gradients " + bytes(m.gradients) +
         ", optimizer " + bytes(m.optimizer) + ", activations " + bytes(m.activations) + " (" +
         std::to_string(m.in_flight) + " micro-batch" + (m.in_flight == 1 ? "" : "es") + " in flight)";
}

}  // namespace

GridFlags parse_grid_flags(const Args& args, const SolverConfig* solver) {
  GridFlags f;
  f.mode = args.has("grid") ? GridMode::kOn : GridMode::kOff;
  if (f.mode == GridMode::kOff) {
    if (args.has("memory-per-device")) fail<ConfigError>("--memory-per-device is for the dp x pp x tp grid: add --grid");
    if (args.has("shard")) fail<ConfigError>("--shard is for the dp x pp x tp grid: add --grid");
    if (args.has("schedule") && !args.has("host-cores")) {
      fail<ConfigError>("--schedule is for --grid (the activations each schedule keeps) or --host-cores (the order a "
                        "pipeline's stages run in when they share cores): add one of them");
    }
    return f;
  }
  for (const char* flag : {"strategy", "measured", "host-cores"}) {
    if (args.has(flag)) {
      fail<ConfigError>("--", flag, " is for the strategy table, not --grid: drop one of them (--grid ranks every "
                        "dp x pp x tp layout)");
    }
  }
  if (args.has("memory-per-device")) {
    f.memory_per_device = static_cast<double>(parse_memory_size(args.get("memory-per-device"), "--memory-per-device"));
  }
  if (solver) {
    f.memory.schedule = parallel::parse_model_parallel_config(solver->parallel).pipeline.schedule;
    // The solver's own optimizer, as its Net counts it (NetOptions::optimizer_slots).
    f.memory.optimizer_slots = static_cast<int>(make_optimizer(solver->optimizer)->slot_names().size());
    f.optimizer_note = std::string(solver_type_name(solver->optimizer.type)) + " (the solver's)";
  } else {
    f.optimizer_note = "SGD with momentum (assumed; --solver gives the solver's own)";
  }
  if (args.has("schedule")) f.memory.schedule = parallel::parse_pipeline_schedule(args.get("schedule"), "--schedule");
  // --shard NONE,PARAMETERS or all; else the solver's stage beside NONE.
  std::vector<parallel::ShardStage> shards;
  if (args.has("shard")) {
    for (const std::string& name : split_list({args.get("shard")})) {
      if (name == "all") {
        for (const std::string& stage : parallel::shard_stage_names()) {
          shards.push_back(parallel::parse_shard_stage(stage, "--shard"));
        }
      } else {
        shards.push_back(parallel::parse_shard_stage(name, "--shard"));
      }
    }
  } else if (solver) {
    shards.push_back(parallel::ShardStage::kNone);
    shards.push_back(parallel::parse_data_parallel_config(solver->parallel).shard);
  }
  if (!shards.empty()) {
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    f.shards = shards;
  }
  return f;
}

void print_grid_estimates(const GridFlags& flags, const estimate::StepProfile& profile, const estimate::Link& link,
                          const estimate::StrategyOptions& options, const std::vector<int>& workers,
                          const std::string& chart_path) {
  estimate::GridOptions grid;
  grid.data = options.data;  // ring allreduce, buckets overlapping backward, as dp-ring
  grid.micro_batches = options.micro_batches;
  grid.memory = flags.memory;
  grid.shards = flags.shards;
  const bool shard_column = flags.shards != std::vector<parallel::ShardStage>{parallel::ShardStage::kNone};
  const double limit = flags.memory_per_device;
  std::printf("grid: every dp x pp x tp layout%s; %s schedule, %d micro-batches when pp > 1; optimizer %s: %d "
              "weight-sized cop%s of its state; memory per device: %s\n",
              estimate::has_split_layers(profile) ? "" : " with tp 1 (no layer of the net is split)",
              parallel::pipeline_schedule_name(flags.memory.schedule), grid.micro_batches,
              flags.optimizer_note.c_str(), flags.memory.optimizer_slots,
              flags.memory.optimizer_slots == 1 ? "y" : "ies", limit > 0 ? bytes(limit).c_str() : "no limit given");
  if (shard_column) {
    std::string names;
    for (parallel::ShardStage s : flags.shards) names += std::string(names.empty() ? "" : ", ") + parallel::shard_stage_name(s);
    std::printf("sharded data parallel (%s) ranked on the layouts with dp > 1, each stage sliced over its dp group: reduce-scatter, 1/dp of the optimizer "
                "state, the reduced slice of the gradients beside bucket slots (OPTIMIZER: every bucket; GRADIENTS, "
                "PARAMETERS: two in turn), 1/dp of the weights (PARAMETERS: plus the largest layer's gathered; else "
                "beside the whole ones), weights allgathered once "
                "per step after the update (PARAMETERS: in forward and in backward, a bucket ahead, 1.5x an allreduce's bytes)\n",
                names.c_str());
  }
  estimate::ChartSeries best_line;
  best_line.name = limit > 0 ? "best layout that fits" : "best layout";
  for (int n : workers) {
    const estimate::GridRanking r = estimate::rank_grid(profile, n, link, grid, limit);
    std::printf("\n%d worker%s: %zu layout%s\n", n, n == 1 ? "" : "s", r.fitting.size() + r.too_big.size(),
                r.fitting.size() + r.too_big.size() == 1 ? "" : "s");
    if (!r.fitting.empty()) {
      std::printf("%4s %4s %4s %4s %12s %12s %9s %10s %11s %11s %11s %11s %11s%s\n", "rank", "dp", "pp", "tp",
                  "step_ms", "samples/s", "speedup", "efficiency", "weights_MiB", "grads_MiB", "optim_MiB", "act_MiB",
                  "memory_MiB", shard_column ? "      shard" : "");
    }
    for (size_t i = 0; i < r.fitting.size(); ++i) {
      print_row(static_cast<int>(i) + 1, r.fitting[i], profile, shard_column);
    }
    for (const estimate::GridEstimate& g : r.too_big) {
      std::printf("does not fit: %s: %s > %s (%s)\n", estimate::layout_name(g).c_str(), bytes(g.memory.total()).c_str(),
                  bytes(limit).c_str(), memory_detail(g.memory).c_str());
    }
    if (!r.fitting.empty()) {
      const estimate::GridEstimate& b = r.fitting.front();
      std::printf("best at %d worker%s: %s, %.1f samples/s (speedup %.2f), %s per device\n", n, n == 1 ? "" : "s",
                  estimate::layout_name(b).c_str(), b.step.throughput(), estimate::speedup(b.step, profile),
                  bytes(b.memory.total()).c_str());
      best_line.workers.push_back(n);
      best_line.speedup.push_back(estimate::speedup(b.step, profile));
    } else if (!r.too_big.empty()) {
      const estimate::GridEstimate& s = r.too_big.front();
      std::printf("no layout fits %s at %d worker%s: the smallest, %s, needs %s; give more memory per device or "
                  "more workers\n",
                  bytes(limit).c_str(), n, n == 1 ? "" : "s", estimate::layout_name(s).c_str(), bytes(s.memory.total()).c_str());
    }
  }
  if (!chart_path.empty()) {
    estimate::write_speedup_chart(chart_path, "predicted speedup: " + profile.net + " on " + link.name + ", dp x pp x tp",
                                  {best_line});
    std::printf("wrote %s\n", chart_path.c_str());
  }
}

}  // namespace strata::cli
