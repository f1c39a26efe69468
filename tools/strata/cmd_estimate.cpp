// strata estimate: predict the step time, throughput, speedup and scaling
// efficiency of each way to parallelise a net, from per-layer times measured
// here (the strata time machinery) or read from a times file, and a link
// model (parallel/estimate/). Prints a table; --chart writes an SVG.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "framework/error.h"
#include "framework/net.h"
#include "framework/solver/precision.h"
#include "framework/solver/solver_config.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/estimate/speedup_chart.h"
#include "parallel/estimate/strategies.h"
#include "parallel/estimate/tensor_parallel_cost.h"
#include "parallel/estimate/times_file.h"
#include "parallel/estimate/link_probe.h"
#include "parallel/estimate/profile_scale.h"
#include "tools/strata/layer_flops.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/rendezvous/env.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "tools/strata/estimate_grid.h"
#include "tools/strata/layer_timing.h"

namespace strata::cli {

namespace {

constexpr int kMaxWorkers = 1 << 20;

std::vector<int> parse_workers(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const int n = parallel::parse_positive_count(item, "--workers");
    if (n > kMaxWorkers) fail<ConfigError>("--workers: ", n, " is more than ", kMaxWorkers);
    out.push_back(n);
  }
  if (out.empty()) fail<ConfigError>("--workers: give a comma-separated list, e.g. 1,2,4,8");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double parse_positive_number(const std::string& text, const char* flag) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !(v > 0) || !std::isfinite(v)) {
    fail<ConfigError>(flag, ": expected a positive number, got '", text, "'");
  }
  return v;
}

std::string comma_list(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The step profile: from --times, or measured on the net of --model or --solver.
estimate::StepProfile load_profile(const Args& args, const SolverConfig* solver) {
  const int sources = args.has("times") + args.has("model") + args.has("solver");
  if (sources != 1) fail<ConfigError>("give exactly one of --model NET, --solver S or --times FILE");
  if (args.has("times")) {
    if (args.has("timeline")) fail<ConfigError>("--timeline needs the net (--model or --solver), not --times");
    return estimate::read_times_file(args.get("times"));
  }
  NetOptions options;
  options.phase = Phase::kTrain;
  options.device = device_flag(args);
  // Planned as `strata train` plans it (the solver's blob_memory, else the
  // default), so the grid's activations are what training holds (step_profile).
  options.blob_memory = solver ? solver->blob_memory : SolverConfig{}.blob_memory;
  // And stored as it trains: 16-bit activations under precision BF16/FP16
  // (framework/solver/precision.h), timed in the solver's GPU math.
  if (solver) {
    options.storage_dtype = storage_dtype_of(solver->precision);
    if (!options.device.is_cpu()) apply_precision(solver->precision, options.device, solver->source);
  }
  std::unique_ptr<Net> net;
  if (solver && solver->has_net_param) {
    options.base_dir = solver->base_dir;
    net = std::make_unique<Net>(solver->net_param, options);
  } else {
    const std::string path = solver ? (solver->net.empty() ? solver->train_net : solver->net) : args.get("model");
    net = Net::from_file(path, options);
  }
  if (args.has("device-throughput")) {
    // Nothing is timed: the step comes from the published throughput, split by FLOPs.
    LayerTimes none;
    none.forward_ms.assign(net->num_layers(), 0.0);
    none.backward_ms.assign(net->num_layers(), 0.0);
    estimate::StepProfile p = step_profile(*net, none);
    add_layer_flops(*net, &p);
    return p;
  }
  if (args.has("timeline")) {
    const LayerTimes times = layer_times_from_trace(args.get("timeline"), *net);
    std::printf("layer times %s\n", times.note.c_str());
    return step_profile(*net, times);
  }
  const int iterations = args.has("iterations") ? iterations_flag(args) : 20;
  const LayerTimes times = measure_layer_times(*net, iterations);
  std::printf("measured %d layers over %d iterations (%s)\n", net->num_layers(), iterations, times.note.c_str());
  return step_profile(*net, times);
}

struct MeasuredSpeedup {
  std::string strategy;
  int workers = 0;
  double speedup = 0.0;
};

// strategy,workers,speedup per line; '#' comments and a header line allowed.
std::vector<MeasuredSpeedup> read_measured(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail<IoError>(path, ": cannot read the measured speedups: ", std::strerror(errno));
  std::vector<MeasuredSpeedup> out;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#' || line.rfind("strategy", 0) == 0) continue;
    std::istringstream f(line);
    MeasuredSpeedup m;
    std::string workers, speedup;
    if (!std::getline(f, m.strategy, ',') || !std::getline(f, workers, ',') || !std::getline(f, speedup)) {
      fail<ConfigError>(path, ":", no, ": expected strategy,workers,speedup, got '", line, "'");
    }
    estimate::parse_strategies(m.strategy);  // a known strategy name, or a ConfigError listing them
    char* end = nullptr;
    m.workers = static_cast<int>(std::strtol(workers.c_str(), &end, 10));
    if (*end != '\0' || m.workers < 1) fail<ConfigError>(path, ":", no, ": workers must be a positive count, got '", workers, "'");
    m.speedup = std::strtod(speedup.c_str(), &end);
    if (*end != '\0' || !(m.speedup > 0)) fail<ConfigError>(path, ":", no, ": speedup must be > 0, got '", speedup, "'");
    out.push_back(m);
  }
  if (out.empty()) fail<ConfigError>(path, ": no measured speedups in it (strategy,workers,speedup per line)");
  return out;
}

}  // namespace

int estimate_main(int argc, char** argv) {
  std::string links = comma_list(estimate::link_names());
  Args args("estimate",
            {{"model", FlagKind::kValue, "net prototxt whose layers are timed here", ""},
             {"timeline", FlagKind::kValue,
              "with --model or --solver: take the layer times from a strata train --timeline trace instead of timing here",
              ""},
             {"solver", FlagKind::kValue, "solver prototxt: its net, and its parallel { } block's bucket_mb, compression "
                                          "and micro_batches",
              ""},
             {"times", FlagKind::kValue, "per-layer times file from strata time --out, instead of timing here", ""},
             {"workers", FlagKind::kValue, "comma-separated worker counts", "1,2,4,8,16,32,64"},
             {"link", FlagKind::kValue,
              "link between workers: " + links + ", or measured (probed between the ranks of a strata launch job)",
              "10gbe"},
             {"measured", FlagKind::kValue,
              "CSV of measured speedups (strategy,workers,speedup) to compare with the predictions and draw on the chart",
              ""},
             {"strategy", FlagKind::kValue,
              "comma-separated: dp-ring, dp-tree, dp-no-overlap, ps-central (= ps-central-worst, ps-central-best), "
              "ps-sharded, pipeline, tp",
              "all but tp; tp too when the net has split layers"},
             {"bucket-mb", FlagKind::kValue, "data parallel: MiB of gradients per bucket", "solver's, else 25"},
             {"micro-batches", FlagKind::kValue, "pipeline: micro-batches per step", "solver's if > 1, else 8"},
             {"host-cores", FlagKind::kValue,
              "model every worker on this one host of N cores, one thread each: compute slows by ceil(workers / N) "
              "when there are more workers than cores, and a pipeline's schedule is simulated with its running "
              "stages sharing the cores (for checking predictions against runs on one machine)",
              "a device per worker"},
             {"shards", FlagKind::kValue, "ps-sharded: parameter-server shards", "one per worker"},
             {"grid", FlagKind::kSwitch,
              "instead of the strategy table: every dp x pp x tp layout of each worker count, ranked by throughput, "
              "with its memory per device",
              ""},
             {"memory-per-device", FlagKind::kValue, "--grid: the memory of one device, e.g. 16G; layouts that need "
                                                     "more do not fit",
              "no limit"},
             {"shard", FlagKind::kValue,
              "with --grid: sharded data parallel stages to rank the layouts with dp > 1 with (NONE, OPTIMIZER, "
              "GRADIENTS, PARAMETERS, comma-separated, or all)",
              "NONE, and the solver's stage"},
             {"schedule", FlagKind::kValue,
              "pipeline schedule, gpipe or 1f1b: with --grid, for the activations kept; with --host-cores, the order "
              "the stages' work is simulated in",
              "solver's, else 1f1b"},
             {"device-throughput", FlagKind::kValue,
              "samples/s of one device training alone (a published number): the step becomes batch / this, split "
              "over the layers by their FLOPs; nothing is timed here",
              ""},
             {"batch", FlagKind::kValue, "with --device-throughput: per-worker batch that throughput was measured at",
              "the net's"},
             {"gpus-per-node", FlagKind::kValue,
              "devices per server: data parallel then allreduces hierarchically (inside each server over "
              "--node-link, between servers over --link)",
              "0: every hop is --link"},
             {"node-link", FlagKind::kValue, "with --gpus-per-node: the link inside a server (a --link preset)",
              "nvlink"},
             {"nics-per-node", FlagKind::kValue,
              "with --gpus-per-node: network adapters per server, shared by its devices", "1"},
             {"chart", FlagKind::kValue, "write an SVG chart of speedup against workers", ""},
             {"iterations", FlagKind::kValue, "timed iterations when measuring", "20"},
             {"device", FlagKind::kValue, "where layers are timed: cpu, cuda or cuda:N", "cpu"},
             {"threads", FlagKind::kValue, "CPU threads", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;

  std::unique_ptr<SolverConfig> solver;
  if (args.has("solver")) solver = std::make_unique<SolverConfig>(load_solver_config(args.get("solver")));
  estimate::StrategyOptions options;
  if (solver) {
    const parallel::DataParallelConfig dp = parallel::parse_data_parallel_config(solver->parallel);
    options.data.bucket_bytes = static_cast<double>(dp.bucket_bytes());
    if (dp.compression != parallel::GradCompression::kNone) options.data.wire_bytes_per_gradient_byte = 0.5;
    const parallel::ModelParallelConfig mp = parallel::parse_model_parallel_config(solver->parallel);
    if (mp.pipeline.micro_batches > 1) options.micro_batches = mp.pipeline.micro_batches;
    options.schedule = mp.pipeline.schedule;
  }
  if (args.has("schedule")) options.schedule = parallel::parse_pipeline_schedule(args.get("schedule"), "--schedule");
  if (args.has("bucket-mb")) {
    options.data.bucket_bytes = parallel::parse_bucket_mb(args.get("bucket-mb"), "--bucket-mb") * (1 << 20);
  }
  if (args.has("micro-batches")) {
    options.micro_batches = parallel::parse_positive_count(args.get("micro-batches"), "--micro-batches");
  }
  if (args.has("host-cores")) {
    options.host_cores = parallel::parse_positive_count(args.get("host-cores"), "--host-cores");
  }
  if (args.has("shards")) options.shards = parallel::parse_positive_count(args.get("shards"), "--shards");
  estimate::DeviceThroughput device;
  if (args.has("device-throughput")) {
    device.samples_per_second = parse_positive_number(args.get("device-throughput"), "--device-throughput");
    if (args.has("batch")) device.batch = parallel::parse_positive_count(args.get("batch"), "--batch");
  } else if (args.has("batch")) {
    fail<ConfigError>("--batch goes with --device-throughput (the batch a published throughput was measured at); "
                      "a timed net uses its own batch");
  }
  if (args.has("gpus-per-node")) {
    options.data.nodes.devices_per_node = parallel::parse_positive_count(args.get("gpus-per-node"), "--gpus-per-node");
    const std::string node_link = args.get("node-link", "nvlink");
    options.data.nodes.intra =
        estimate::link_preset(node_link, node_link == "shm" ? estimate::measure_memcpy_bandwidth() : 0.0);
    if (args.has("nics-per-node")) {
      options.data.nodes.nics_per_node = parallel::parse_positive_count(args.get("nics-per-node"), "--nics-per-node");
    }
  } else if (args.has("node-link") || args.has("nics-per-node")) {
    fail<ConfigError>("--node-link and --nics-per-node describe the servers of --gpus-per-node; give --gpus-per-node");
  }
  const std::vector<int> workers = parse_workers(args.get("workers", "1,2,4,8,16,32,64"));
  const std::string link_name = args.get("link", "10gbe");
  // Checked before the timing so a typo costs nothing.
  if (link_name != "measured") estimate::link_preset(link_name, /*shm_memcpy_bandwidth=*/1.0);
  const std::vector<MeasuredSpeedup> measured =
      args.has("measured") ? read_measured(args.get("measured")) : std::vector<MeasuredSpeedup>{};
  // --link measured: every rank of the job takes part in the probe; then
  // rank 0 alone times the layers and prints.
  estimate::Link probed;
  if (link_name == "measured") {
    const parallel::RankEnv env = parallel::detect_rank_env();
    if (!env.distributed()) estimate::probe_link(*std::make_unique<LocalCommunicator>());
    parallel::CommunicatorOptions copts;
    copts.backend = parallel::BackendChoice::kTcp;
    const std::unique_ptr<Communicator> comm = parallel::create_communicator(env, copts);
    probed = estimate::probe_link(*comm);
    if (comm->rank() != 0) return 0;
  }
  const std::vector<estimate::Strategy> chosen_flag =
      args.has("strategy") ? estimate::parse_strategies(args.get("strategy")) : std::vector<estimate::Strategy>{};
  const GridFlags grid = parse_grid_flags(args, solver.get());

  std::string scaled_how;
  const estimate::StepProfile profile =
      device.samples_per_second > 0 ? estimate::scale_to_throughput(load_profile(args, solver.get()), device, &scaled_how)
                                    : load_profile(args, solver.get());
  const estimate::Link link =
      link_name == "measured"
          ? probed
          : estimate::link_preset(link_name, link_name == "shm" ? estimate::measure_memcpy_bandwidth() : 0.0);
  std::vector<estimate::Strategy> strategies = chosen_flag;
  if (strategies.empty()) {
    strategies = estimate::parse_strategies("dp-ring,dp-tree,dp-no-overlap,ps-central,ps-sharded,pipeline");
    if (estimate::has_split_layers(profile)) strategies.push_back(estimate::Strategy::kTensor);
  }

  std::printf("net '%s': %zu layers, batch %d per worker, forward %.3f ms + backward %.3f ms per step, "
              "%.3f MiB of gradients\n",
              profile.net.c_str(), profile.layers.size(), profile.batch, profile.forward_seconds() * 1e3,
              profile.backward_seconds() * 1e3, profile.grad_bytes() / (1 << 20));
  if (!scaled_how.empty()) std::printf("device throughput: %s\n", scaled_how.c_str());
  std::printf("link %s: %.2f GB/s per direction, %.1f us latency (%s)\n", link.name.c_str(), link.bandwidth / 1e9,
              link.latency * 1e6, link.source.c_str());
  if (options.data.nodes.given()) {
    const estimate::NodeTopology& nodes = options.data.nodes;
    std::printf("servers of %d devices joined by %s (%.2f GB/s, %.1f us), %d network adapter%s each: data parallel "
                "allreduces hierarchically (reduce-scatter inside, allreduce across servers, allgather inside); "
                "%s\n",
                nodes.devices_per_node, nodes.intra.name.c_str(), nodes.intra.bandwidth / 1e9, nodes.intra.latency * 1e6,
                nodes.nics_per_node, nodes.nics_per_node == 1 ? "" : "s",
                grid.mode == GridMode::kOn ? "the grid packs ranks per server, tp fastest, then pp, then dp: a tp group or a "
                                             "pipeline inside one server uses its link"
                                           : "the other strategies see --link only");
  }
  if (options.host_cores > 0) {
    std::printf("workers share this host's %d cores (--host-cores): compute slows by ceil(workers / %d) beyond %d "
                "workers; a pipeline's %s schedule is simulated with its running stages sharing the cores\n",
                options.host_cores, options.host_cores, options.host_cores,
                parallel::pipeline_schedule_name(options.schedule));
  }
  // The grid has no parameter server: its shard count would not apply.
  const std::string shards = grid.mode == GridMode::kOn ? ""
                             : options.shards > 0       ? "; ps-sharded: " + std::to_string(options.shards) + " shards"
                                                        : "; ps-sharded: one shard per worker";
  std::printf("data parallel: %g MiB buckets%s; pipeline: %d micro-batches%s\n\n",
              options.data.bucket_bytes / (1 << 20),
              options.data.wire_bytes_per_gradient_byte < 1 ? ", 16-bit gradients on the wire" : "",
              options.micro_batches, shards.c_str());
  if (grid.mode == GridMode::kOn) {
    print_grid_estimates(grid, profile, link, options, workers, args.get("chart"));
    return 0;
  }
  std::printf("%-17s %7s %12s %12s %9s %10s %10s %11s\n", "strategy", "workers", "step_ms", "samples/s", "speedup",
              "efficiency", "comm_ms", "exposed_ms");
  std::vector<estimate::ChartSeries> series;
  std::vector<std::string> notes;
  for (estimate::Strategy s : strategies) {
    estimate::ChartSeries line;
    line.name = estimate::strategy_name(s);
    for (int n : workers) {
      const estimate::StepEstimate e = estimate::estimate_step(s, profile, n, link, options);
      if (!e.feasible) {
        std::printf("%-17s %7d %12s %12s %9s %10s %10s %11s\n", line.name.c_str(), n, "-", "-", "-", "-", "-", "-");
        notes.push_back(line.name + " at " + std::to_string(n) + ": " + e.note);
        continue;
      }
      const double sp = estimate::speedup(e, profile);
      std::printf("%-17s %7d %12.4f %12.1f %9.2f %9.1f%% %10.4f %11.4f\n", line.name.c_str(), n, e.step * 1e3,
                  e.throughput(), sp, 100 * estimate::efficiency(e, profile), e.communication * 1e3, e.exposed * 1e3);
      line.workers.push_back(n);
      line.speedup.push_back(sp);
    }
    series.push_back(line);
  }
  for (const std::string& note : notes) std::printf("not possible: %s\n", note.c_str());
  if (args.has("timeline")) {
    // The trace's own communication beside the model's at its rank count:
    // how much of the allreduce the run hid behind backward, measured.
    const TraceCommunication c = communication_from_trace(args.get("timeline"));
    if (c.ranks > 1 && c.busy_ms > 0) {
      const estimate::Strategy s = c.overlapped ? estimate::Strategy::kDpRing : estimate::Strategy::kDpNoOverlap;
      const estimate::StepEstimate e =
          estimate::estimate_step(s, profile, c.ranks, link, options);
      std::printf("\nthe timeline's run: %d ranks, rank 0's %d steps of %.3f ms: allreduce busy %.3f ms per step "
                  "(%.1f buckets), exposed %.3f ms (%.0f%% hidden behind backward)\n",
                  c.ranks, c.steps, c.step_ms, c.busy_ms, c.buckets_per_step, c.exposed_ms,
                  100.0 * std::max(0.0, 1.0 - c.exposed_ms / c.busy_ms));
      std::printf("predicted for %s at %d workers: step %.3f ms, communication %.3f ms, exposed %.3f ms\n",
                  estimate::strategy_name(s), c.ranks, e.step * 1e3, e.communication * 1e3, e.exposed * 1e3);
    }
  }
  if (!measured.empty()) {
    // Predicted against measured, case by case; the measured points join the chart.
    std::printf("\n%-17s %7s %10s %10s %8s\n", "measured", "workers", "predicted", "measured", "error");
    std::vector<double> errors;
    for (const MeasuredSpeedup& m : measured) {
      const estimate::StepEstimate e =
          estimate::estimate_step(estimate::parse_strategies(m.strategy).front(),
                                  profile, m.workers, link, options);
      const double p = e.feasible ? estimate::speedup(e, profile) : 0.0;
      const double err = (p - m.speedup) / m.speedup;
      errors.push_back(std::abs(err));
      std::printf("%-17s %7d %10.2f %10.2f %+7.1f%%\n", m.strategy.c_str(), m.workers, p, m.speedup, 100 * err);
      auto it = std::find_if(series.begin(), series.end(), [&](const estimate::ChartSeries& c) {
        return c.style == estimate::SeriesStyle::kMeasured && c.name == m.strategy;
      });
      if (it == series.end()) {
        series.push_back({m.strategy, {}, {}, estimate::SeriesStyle::kMeasured});
        it = series.end() - 1;
      }
      it->workers.push_back(m.workers);
      it->speedup.push_back(m.speedup);
    }
    std::sort(errors.begin(), errors.end());
    std::printf("error: median %.1f%%, largest %.1f%% over %zu measured cases\n", 100 * errors[errors.size() / 2],
                100 * errors.back(), errors.size());
  }
  if (args.has("chart")) {
    const std::string path = args.get("chart");
    estimate::write_speedup_chart(path, "predicted speedup: " + profile.net + " on " + link.name, series);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace strata::cli
