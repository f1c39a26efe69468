// strata train: run a solver file; resume from a snapshot or start from weights.
#include <algorithm>
#include <atomic>
#include <memory>
#include <csignal>
#include <filesystem>
#include <functional>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "framework/io/checkpoint.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"
#endif
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/byte_size.h"
#include "framework/memory_cap.h"
#include "framework/solver.h"
#include "framework/tensor.h"
#include "framework/threads.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/rendezvous/env.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "parallel/model_parallel/model_parallel_run.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "transfer/freeze.h"
#include "transfer/pretrained.h"

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

// The solver file's parallel { pipeline { } tensor { } } blocks, then the command line on top.
parallel::ModelParallelConfig model_parallel_config(const SolverConfig& config, const Args& args) {
  parallel::ModelParallelConfig c = parallel::parse_model_parallel_config(config.parallel);
  if (args.has("pp")) c.pipeline.stages = parallel::parse_positive_count(args.get("pp"), "--pp");
  if (args.has("micro-batches")) {
    c.pipeline.micro_batches = parallel::parse_positive_count(args.get("micro-batches"), "--micro-batches");
  }
  if (args.has("schedule")) c.pipeline.schedule = parallel::parse_pipeline_schedule(args.get("schedule"), "--schedule");
  if (args.has("tp")) c.tensor_size = parallel::parse_positive_count(args.get("tp"), "--tp");
  return c;
}

}  // namespace

Device device_flag(const Args& args) {
  Device device = Device::parse(args.get("device", "cpu"));
  if (device.is_cpu()) return device;
#ifdef STRATA_WITH_CUDA
  // Plain "cuda" with several ranks on this host: one GPU per local rank
  // (round robin when there are more ranks than GPUs); "cuda:N" is taken as given.
  if (args.get("device") == "cuda") {
    const parallel::RankEnv env = parallel::detect_rank_env();
    const int gpus = cuda::device_count();
    if (env.local_rank > 0 && gpus > 0) device = Device::cuda(env.local_rank % gpus);
  }
  cuda::set_device(device.index);  // ConfigError naming the devices there are
#else
  fail<ConfigError>("--device ", device.str(),
                    ": this build of strata has no CUDA backend (it was built without nvcc or with "
                    "-DSTRATA_CUDA=OFF); use --device cpu");
#endif
  return device;
}

void apply_common_flags(const Args& args) {
  device_flag(args);
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
             {"weights-format", FlagKind::kValue,
              "names in the --weights file: auto, strata, torchvision-vgg, torchvision-vit, timm-vit", "auto"},
             {"freeze", FlagKind::kRepeated,
              "freeze layers whose names match (glob with * and ?, e.g. 'conv*'): lr_mult 0, no backward, "
              "BatchNorm on running statistics",
              ""},
             {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA)", "cpu"},
             {"threads", FlagKind::kValue, "CPU threads for GEMM and layer loops (0 = all cores)",
              "all cores"},
             {"dp-backend", FlagKind::kValue, "data parallel: communication backend (auto, tcp, nccl, mpi)",
              "solver's parallel block, else auto"},
             {"dp-algorithm", FlagKind::kValue, "data parallel: allreduce algorithm (auto, ring, tree)",
              "solver's parallel block, else auto"},
             {"bucket-mb", FlagKind::kValue, "data parallel: MiB of gradients per allreduce bucket",
              "solver's parallel block, else 25"},
             {"no-overlap", FlagKind::kSwitch, "data parallel: allreduce after backward instead of during it", ""},
             {"compression", FlagKind::kValue, "data parallel: gradients on the wire as NONE, FP16 or BF16",
              "solver's parallel block, else NONE"},
             {"pp", FlagKind::kValue, "pipeline parallel: stages (ranks per pipeline)", "solver's parallel block, else 1"},
             {"micro-batches", FlagKind::kValue, "pipeline parallel: micro-batches per step (the data layer's batch is one)",
              "solver's parallel block, else 1"},
             {"schedule", FlagKind::kValue, "pipeline parallel: gpipe or 1f1b", "solver's parallel block, else 1f1b"},
             {"tp", FlagKind::kValue, "tensor parallel: ranks per tensor-parallel group", "solver's parallel block, else 1"},
             {"max-memory", FlagKind::kValue, "cap on this process's tensor storage, e.g. 64M or 2G", "no cap"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  if (args.has("weights") && args.has("snapshot")) {
    fail<ConfigError>("give --weights or --snapshot, not both (a snapshot holds its own weights)");
  }
  if (args.has("reinit") && !args.has("weights")) {
    fail<ConfigError>("--reinit only applies with --weights");
  }
  if (args.has("weights-format") && !args.has("weights")) {
    fail<ConfigError>("--weights-format only applies with --weights");
  }
  const transfer::WeightsFormat weights_format =
      transfer::parse_weights_format(args.get("weights-format", "auto"), "--weights-format");

  const SolverConfig config = load_solver_config(args.require("solver"));
  const parallel::DataParallelConfig dp_config = data_parallel_config(config, args);
  const parallel::ModelParallelConfig mp_config = model_parallel_config(config, args);
  if (args.has("max-memory")) set_memory_cap(parse_memory_size(args.get("max-memory"), "--max-memory"));

  // More than one rank (strata launch, mpirun, srun): synchronous data
  // parallel. Rank 0 alone prints, logs and writes snapshots.
  const parallel::RankEnv env = parallel::detect_rank_env();
  if (!args.has("threads") && env.local_world_size > 1) {
    set_num_threads(std::max(1, hardware_threads() / env.local_world_size));  // share the cores
  }
  const Device device = device_flag(args);
  if (env.distributed() && !device.is_cpu() &&
      (mp_config.pipeline.stages > 1 || mp_config.tensor_size > 1)) {
    fail<ConfigError>("--device ", device.str(), ": pipeline and tensor parallelism run on the CPU only so far; "
                      "on GPUs use data parallelism (strata launch without --pp/--tp), or use --device cpu");
  }
  // With a GPU, backend auto is nccl (when built with it): the gradients are
  // reduced on the device; tcp and mpi stage them through host memory.
  std::unique_ptr<Communicator> comm;
  if (env.distributed()) comm = parallel::create_communicator(env, {dp_config.backend, dp_config.algorithm, device});
  const bool lead = env.rank == 0;
  SolverOptions solver_options;
  solver_options.rank = env.rank;
  solver_options.world_size = env.world_size;
  solver_options.comm = comm.get();
  solver_options.snapshots = lead ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
  solver_options.device = device;
  // Pipeline / tensor parallelism (--pp, --tp): the dp x pp x tp grid and
  // this rank's stage, which builds only its own layers.
  parallel::ModelParallelRun mp = parallel::start_model_parallel(config, mp_config, env, comm.get(), solver_options, std::cout);
  if (mp.active() && !device.is_cpu()) {  // stages given by `stage:` on layers
    fail<ConfigError>("--device ", device.str(), ": pipeline and tensor parallelism run on the CPU only so far; "
                      "use --device cpu");
  }
  std::unique_ptr<Solver> own_solver;
  if (!mp.pipe) own_solver = std::make_unique<Solver>(config, solver_options);
  Solver& solver = mp.pipe ? mp.pipe->solver() : *own_solver;
  if (lead) {
    std::printf("strata train: %s, %d threads, net '%s' (%s)\n", config.source.c_str(), num_threads(),
                solver.net().name().c_str(), solver.net().memory_report().str().c_str());
  }

  if (args.has("freeze")) {
    // Every rank freezes the same layers, before the optimizer history and
    // the data-parallel buckets are laid out.
    std::vector<std::string> patterns;
    for (const std::string& p : split_list(args.get_all("freeze"))) patterns.push_back(p);
    const transfer::FreezeReport frozen = transfer::freeze_layers(solver.net(), patterns, "--freeze");
    solver.optimizer().prepare(solver.net().params());
    if (lead) std::printf("%s\n", frozen.str().c_str());
  }

  bool resumed = false;
  if (args.has("snapshot")) {
    // Every rank reads the same snapshot (a pipeline stage restores its part).
    const ResumeInfo info = mp.pipe ? mp.pipe->restore(args.get("snapshot")) : solver.restore(args.get("snapshot"));
    if (lead) {
      std::printf("resumed from %s at iteration %lld\n", info.state_path.c_str(),
                  static_cast<long long>(info.iter));
      if (info.config_changed) {
        std::printf("note: the solver settings differ from those of the run that wrote this snapshot\n");
      }
      if (info.snapshot_world_size != solver.options().world_size) {
        std::printf("note: the snapshot was written by %d data-parallel rank%s and this run has %d; %s\n",
                    info.snapshot_world_size, info.snapshot_world_size == 1 ? "" : "s", solver.options().world_size,
                    info.data_order_restarted ? "the data order restarts from the beginning of an epoch"
                                              : "each rank reads its own share of the data");
      }
    }
    resumed = true;
  } else if (args.has("weights") && (lead || mp.active())) {
    // Rank 0 reads the weights; the data-parallel start broadcasts them.
    // Pipeline stages each read their own layers' parameters, and
    // tensor-parallel ranks their blocks of the split ones.
    transfer::PretrainedOptions options;
    options.format = weights_format;
    options.reinit = split_list(args.get_all("reinit"));
    const LoadReport report = transfer::load_pretrained(solver.net(), args.get("weights"), options);
    std::printf("%s\n", report.str().c_str());
  }

  std::unique_ptr<parallel::DataParallel> dp;
  Communicator* dp_comm = mp.active() ? (mp.dp_comm()->world_size() > 1 ? mp.dp_comm() : nullptr) : comm.get();
  if (dp_comm) {
    dp = std::make_unique<parallel::DataParallel>(solver, *dp_comm, dp_config);
    if (lead) {
      std::printf("data parallel: %d ranks, %s backend, %s, %zu gradient bucket%s\n", dp_comm->world_size(),
                  comm->backend_name().c_str(), dp_config.summary().c_str(), dp->buckets().size(),
                  dp->buckets().size() == 1 ? "" : "s");
    }
  }
  if (mp.pipe) {
    // After DataParallel's hooks (these replace its snapshot, test and outputs hooks).
    mp.pipe->install_snapshot_hooks(dp_comm);
    std::function<void()> agree_buffers;
    if (dp) agree_buffers = [&dp] { dp->average_buffers(); };
    mp.pipe->install_test_hooks(dp_comm, agree_buffers);
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
  if (lead) {
    // FP16 loss-scale overflows: the step is skipped and the console says so.
    solver.set_notice_sink([](const std::string& msg) { std::printf("note: %s\n", msg.c_str()); });
    if (!solver_options.device.is_cpu()) {
      std::printf("device %s, precision %s\n", solver_options.device.str().c_str(), precision_name(config.precision));
    }
  }
  // With several ranks, all stop after the same iteration once any one is interrupted.
  solver.set_stop_flag(dp ? dp->stop_flag(&g_stop) : &g_stop);
  std::signal(SIGINT, on_sigint);
  const SolveResult result = solver.solve();
  std::signal(SIGINT, SIG_DFL);
  // Per-rank time and memory (tools/bench/run_pipeline_bench.py reads these):
  // every rank of a model-parallel run, in rank order; else rank 0.
  if (lead || mp.active()) {
    for (int r = 0; r < (mp.active() && comm ? comm->world_size() : 1); ++r) {
      if (!mp.active() || r == env.rank) {
        if (mp.pipe) std::printf("%s\n", mp.pipe->times_line().c_str());
        std::printf("rank %d: peak tensor storage %s, in use at the end %s\n", env.rank,
                    format_bytes(memory_peak()).c_str(), format_bytes(memory_in_use()).c_str());
        std::fflush(stdout);
      }
      if (mp.active() && comm) comm->barrier();
    }
  }
  if (lead) {
    std::printf("log: %s\n", log->path().c_str());
    if (!result.last_snapshot.empty()) std::printf("snapshot: %s\n", result.last_snapshot.c_str());
#ifdef STRATA_WITH_CUDA
    if (!solver_options.device.is_cpu()) {
      std::printf("GPU memory: %s\n", cuda::memory_report(solver_options.device.index).c_str());
      if (const LossScaler* ls = solver.loss_scaler()) {
        std::printf("loss scale %g, %lld update(s) skipped for overflow\n", ls->scale(),
                    static_cast<long long>(ls->skipped_steps()));
      }
    }
#endif
  }
  return result.status == SolveStatus::kInterrupted ? 130 : 0;
}

}  // namespace strata::cli
