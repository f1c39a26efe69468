// strata train: run a solver file; resume from a snapshot or start from weights.
#include <algorithm>
#include <atomic>
#include <memory>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "framework/checkpoint.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/solver.h"
#include "framework/tensor.h"
#include "framework/threads.h"
#include "parallel/communicator_factory.h"
#include "parallel/data_parallel.h"
#include "parallel/data_parallel_config.h"
#include "parallel/env.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"

namespace strata::cli {

namespace {

std::atomic<bool> g_stop{false};

// First Ctrl-C: finish the iteration, write a snapshot, exit cleanly.
// Second Ctrl-C: leave at once (the last good snapshot stays in place, as
// snapshots are only ever replaced by rename).
void on_sigint(int) {
  if (g_stop.exchange(true)) _exit(130);
  const char msg[] = "\nstopping after this iteration and writing a snapshot (Ctrl-C again to quit now)\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
}

std::set<std::string> split_list(const std::vector<std::string>& values) {
  std::set<std::string> out;
  for (const auto& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) out.insert(item);
    }
  }
  return out;
}

// The solver file's parallel { data { } } block, then the command line on top.
parallel::DataParallelConfig data_parallel_config(const SolverConfig& config, const Args& args) {
  parallel::DataParallelConfig c = parallel::parse_data_parallel_config(config.parallel);
  if (args.has("dp-backend")) {
    c.backend = args.get("dp-backend");
    parallel::check_backend(c.backend, "--dp-backend");
  }
  if (args.has("dp-algorithm")) {
    c.algorithm = args.get("dp-algorithm");
    parallel::check_algorithm(c.algorithm, "--dp-algorithm");
  }
  if (args.has("bucket-mb")) c.bucket_mb = parallel::parse_bucket_mb(args.get("bucket-mb"), "--bucket-mb");
  if (args.has("no-overlap")) c.overlap = parallel::Overlap::kOff;
  if (args.has("compression")) {
    c.compression = parallel::parse_grad_compression(args.get("compression"), "--compression");
  }
  return c;
}

}  // namespace

void apply_common_flags(const Args& args) {
  const Device device = Device::parse(args.get("device", "cpu"));
  if (!device.is_cpu()) {
    fail<ConfigError>("--device ", device.str(),
                      ": this build of strata has no CUDA backend yet; use --device cpu");
  }
  const int threads = args.get_int("threads", 0);
  if (threads < 0) fail<ConfigError>("--threads must be >= 0 (0 = all cores)");
  set_num_threads(threads);
}

FlagsParsed parse_command_flags(Args& args, int argc, char** argv) {
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    std::printf("%s", args.help().c_str());
    return FlagsParsed::kHelpShown;
  }
  apply_common_flags(args);
  return FlagsParsed::kRun;
}

int iterations_flag(const Args& args) {
  const int iterations = args.get_int("iterations", 50);
  if (iterations <= 0) fail<ConfigError>("--iterations must be positive");
  return iterations;
}

int train_main(int argc, char** argv) {
  Args args("train",
            {{"solver", FlagKind::kValue, "solver prototxt", ""},
             {"weights", FlagKind::kValue, "initialise from a .safetensors weights file", ""},
             {"snapshot", FlagKind::kValue, "resume from a .solverstate.safetensors snapshot", ""},
             {"reinit", FlagKind::kRepeated, "with --weights: layers (comma-separated) left as initialised",
              ""},
             {"device", FlagKind::kValue, "cpu", "cpu"},
             {"threads", FlagKind::kValue, "CPU threads for GEMM and layer loops (0 = all cores)",
              "all cores"},
             {"dp-backend", FlagKind::kValue, "data parallel: communication backend (auto, tcp, mpi)",
              "solver's parallel block, else auto"},
             {"dp-algorithm", FlagKind::kValue, "data parallel: allreduce algorithm (auto, ring, tree)",
              "solver's parallel block, else auto"},
             {"bucket-mb", FlagKind::kValue, "data parallel: MiB of gradients per allreduce bucket",
              "solver's parallel block, else 25"},
             {"no-overlap", FlagKind::kSwitch, "data parallel: allreduce after backward instead of during it", ""},
             {"compression", FlagKind::kValue, "data parallel: gradients on the wire as NONE, FP16 or BF16",
              "solver's parallel block, else NONE"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  if (args.has("weights") && args.has("snapshot")) {
    fail<ConfigError>("give --weights or --snapshot, not both (a snapshot holds its own weights)");
  }
  if (args.has("reinit") && !args.has("weights")) {
    fail<ConfigError>("--reinit only applies with --weights");
  }

  const SolverConfig config = load_solver_config(args.require("solver"));
  const parallel::DataParallelConfig dp_config = data_parallel_config(config, args);

  // More than one rank (strata launch, mpirun, srun): synchronous data
  // parallel. Rank 0 alone prints, logs and writes snapshots.
  const parallel::RankEnv env = parallel::detect_rank_env();
  if (!args.has("threads") && env.local_world_size > 1) {
    set_num_threads(std::max(1, hardware_threads() / env.local_world_size));  // share the cores
  }
  std::unique_ptr<Communicator> comm;
  if (env.distributed()) comm = parallel::create_communicator(env, {dp_config.backend, dp_config.algorithm});
  const bool lead = env.rank == 0;
  SolverOptions solver_options;
  solver_options.rank = env.rank;
  solver_options.world_size = env.world_size;
  solver_options.comm = comm.get();
  solver_options.snapshots = lead ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
  Solver solver(config, solver_options);
  if (lead) {
    std::printf("strata train: %s, %d threads, net '%s' (%s)\n", config.source.c_str(), num_threads(),
                solver.net().name().c_str(), solver.net().memory_report().str().c_str());
  }

  bool resumed = false;
  if (args.has("snapshot")) {
    // Every rank reads the same snapshot.
    const ResumeInfo info = solver.restore(args.get("snapshot"));
    if (lead) {
      std::printf("resumed from %s at iteration %lld\n", info.state_path.c_str(),
                  static_cast<long long>(info.iter));
      if (info.config_changed) {
        std::printf("note: the solver settings differ from those of the run that wrote this snapshot\n");
      }
      if (info.snapshot_world_size != env.world_size) {
        std::printf("note: the snapshot was written by %d rank%s and this run has %d; %s\n",
                    info.snapshot_world_size, info.snapshot_world_size == 1 ? "" : "s", env.world_size,
                    info.data_order_restarted ? "the data order restarts from the beginning of an epoch"
                                              : "each rank reads its own share of the data");
      }
    }
    resumed = true;
  } else if (args.has("weights") && lead) {
    // Rank 0 reads the weights; the data-parallel start broadcasts them.
    LoadOptions options;
    options.reinit = split_list(args.get_all("reinit"));
    const LoadReport report = load_weights(solver.net(), args.get("weights"), options);
    std::printf("%s\n", report.str().c_str());
  }

  std::unique_ptr<parallel::DataParallel> dp;
  if (comm) {
    dp = std::make_unique<parallel::DataParallel>(solver, *comm, dp_config);
    if (lead) {
      std::printf("data parallel: %d ranks, %s backend, %s, %zu gradient bucket%s\n", env.world_size,
                  comm->backend_name().c_str(), dp_config.summary().c_str(), dp->buckets().size(),
                  dp->buckets().size() == 1 ? "" : "s");
    }
  }

  const std::string prefix_dir = lead ? dirname_of(config.snapshot_prefix) : std::string();
  if (!prefix_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(prefix_dir, ec);
    if (ec) fail<IoError>("cannot create snapshot folder '", prefix_dir, "': ", ec.message());
  }

  std::unique_ptr<TrainingObserver> console;
  std::unique_ptr<JsonLinesLog> log;
  if (lead) {
    if (dp) {
      console = std::make_unique<parallel::DataParallelConsole>(std::cout, *dp);
    } else {
      console = std::make_unique<ConsolePrinter>(std::cout);
    }
    log = std::make_unique<JsonLinesLog>(config.log, resumed ? LogMode::kAppend : LogMode::kTruncate);
    solver.add_observer(console.get());
    solver.add_observer(log.get());
  }
  // With several ranks, all stop after the same iteration once any one is interrupted.
  solver.set_stop_flag(dp ? dp->stop_flag(&g_stop) : &g_stop);
  std::signal(SIGINT, on_sigint);
  const SolveResult result = solver.solve();
  std::signal(SIGINT, SIG_DFL);
  if (lead) {
    std::printf("log: %s\n", log->path().c_str());
    if (!result.last_snapshot.empty()) std::printf("snapshot: %s\n", result.last_snapshot.c_str());
  }
  return result.status == SolveStatus::kInterrupted ? 130 : 0;
}

}  // namespace strata::cli
