// strata train: run a solver file; resume from a snapshot or start from weights.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <vector>
#include <unistd.h>

#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"
#endif
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/memory_cap.h"
#include "framework/solver/solver.h"
#include "framework/tensor.h"
#include "framework/cpu/threads.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/rendezvous/env.h"
#include "parallel/training_run.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "parallel/parameter_server/ps_config.h"
#include "parallel/slowdown.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "tools/strata/flag_lists.h"
#include "transfer/freeze.h"
#include "transfer/pretrained.h"

namespace strata::cli {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};

// The signals that stop training the way Ctrl-C does: what `kill`, `docker
// stop`, systemd and a closed SSH session send (TERM, HUP), and what SLURM
// sends ahead of preemption with --signal (USR1 by choice).
struct StopSignal {
  int sig;
  const char* name;
  const char* message;  // written from the handler: a literal
};
const StopSignal kStopSignals[] = {
    {SIGINT, "INT", "\nSIGINT: stopping after this iteration and writing a snapshot (Ctrl-C again to quit now)\n"},
    {SIGTERM, "TERM", "\nSIGTERM: stopping after this iteration and writing a snapshot (again to quit now)\n"},
    {SIGHUP, "HUP", "\nSIGHUP: stopping after this iteration and writing a snapshot (again to quit now)\n"},
    {SIGUSR1, "USR1", "\nSIGUSR1: stopping after this iteration and writing a snapshot (again to quit now)\n"},
};

// First signal: finish the iteration, write a snapshot, exit with 128 + the
// signal. Second: leave at once (the last good snapshot stays in place, as
// snapshots are only ever replaced by rename).
void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) _exit(128 + sig);
  g_stop_signal.store(sig);
  for (const StopSignal& s : kStopSignals) {
    if (s.sig != sig) continue;
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, s.message, std::strlen(s.message));
  }
}

// STRATA_STOP_SIGNALS: which of INT, TERM, HUP and USR1 stop training
// gracefully ("INT,TERM,HUP,USR1" when unset); the others keep their
// default action. ConfigError naming the variable for anything else.
std::vector<int> stop_signals_from_env() {
  const char* env = std::getenv("STRATA_STOP_SIGNALS");
  const std::string text = env && *env ? env : "INT,TERM,HUP,USR1";
  std::vector<int> out;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.rfind("SIG", 0) == 0) item = item.substr(3);
    const auto it = std::find_if(std::begin(kStopSignals), std::end(kStopSignals),
                                 [&](const StopSignal& s) { return item == s.name; });
    if (it == std::end(kStopSignals)) {
      fail<ConfigError>("STRATA_STOP_SIGNALS is '", text, "': '", item, "' is not one of INT, TERM, HUP, USR1 "
                        "(a comma-separated list of the signals that stop training after a snapshot)");
    }
    out.push_back(it->sig);
  }
  return out;
}

// The solver file's parallel { data { } } block, then the command line on top.
parallel::DataParallelConfig data_parallel_config(const SolverConfig& config, const Args& args) {
  parallel::DataParallelConfig c = parallel::parse_data_parallel_config(config.parallel);
  if (args.has("dp-backend")) c.backend = parallel::parse_dp_backend(args.get("dp-backend"), "--dp-backend");
  if (args.has("dp-algorithm")) {
    c.algorithm = parallel::parse_dp_algorithm(args.get("dp-algorithm"), "--dp-algorithm");
  }
  // --dp-transport of strata train, else of strata launch (which passes it
  // to its ranks as STRATA_DP_TRANSPORT), else the solver file's.
  if (args.has("dp-transport")) {
    c.transport = parallel::parse_dp_transport(args.get("dp-transport"), "--dp-transport");
  } else if (const char* env = std::getenv("STRATA_DP_TRANSPORT"); env && *env) {
    c.transport = parallel::parse_dp_transport(env, "STRATA_DP_TRANSPORT (strata launch --dp-transport)");
  }
  if (args.has("bucket-mb")) c.bucket_mb = parallel::parse_bucket_mb(args.get("bucket-mb"), "--bucket-mb");
  if (args.has("no-overlap")) c.overlap = parallel::Overlap::kOff;
  if (args.has("compression")) {
    c.compression = parallel::parse_grad_compression(args.get("compression"), "--compression");
  }
  if (args.has("shard")) c.shard = parallel::parse_shard_stage(args.get("shard"), "--shard");
  return c;
}

// The solver file's parallel { ps { } } block, then the command line on top;
// any --ps-* flag (or --staleness) asks for a parameter server.
parallel::ParameterServerConfig parameter_server_config(const SolverConfig& config, const Args& args) {
  parallel::ParameterServerConfig c = parallel::parse_ps_config(config.parallel);
  if (args.has("ps-mode")) {
    c.mode = parallel::parse_ps_mode(args.get("ps-mode"), "--ps-mode");
    c.enabled = true;
  }
  if (args.has("staleness")) {
    c.staleness = args.get_int("staleness", 0);
    c.enabled = true;
    if (!args.has("ps-mode") && c.mode != parallel::PsMode::kSsp) {
      fail<ConfigError>("--staleness bounds SSP only; add --ps-mode SSP");
    }
  }
  if (args.has("ps-placement")) {
    c.placement = parallel::parse_ps_placement(args.get("ps-placement"), "--ps-placement");
    c.placement_given = true;
    c.enabled = true;
  }
  if (args.has("ps-servers")) {
    c.servers = args.get_int("ps-servers", 0);
    if (c.servers < 0) fail<ConfigError>("--ps-servers must be 0 or more, got ", c.servers);
    c.enabled = true;
  }
  if (args.has("ps-compression")) {
    c.compression = parallel::parse_grad_compression(args.get("ps-compression"), "--ps-compression");
    c.enabled = true;
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

// --device when given; otherwise the solver's solver_mode as Caffe means it:
// GPU trains on CUDA device device_id (one per local rank, counting on from
// device_id, under a launcher) when this build and machine have one, and on
// the CPU with one notice when not.
Device training_device(const Args& args, const SolverConfig& config, const parallel::RankEnv& env) {
  if (args.has("device") || config.solver_mode != SolverMode::kGPU) return device_flag(args);
  std::string why;
#ifdef STRATA_WITH_CUDA
  const int gpus = cuda::device_count();
  if (gpus > 0) {
    const int64_t index = env.local_world_size > 1 ? (config.device_id + env.local_rank) % gpus : config.device_id;
    const Device device = Device::cuda(static_cast<int>(index));
    cuda::set_device(device.index);  // ConfigError naming the devices there are (device_id out of range)
    return device;
  }
  why = "this machine has no GPU (the CUDA driver finds none)";
#else
  why = "this build of strata has no CUDA backend (built without nvcc or with -DSTRATA_CUDA=OFF)";
#endif
  if (env.rank == 0) {
    std::printf("note: %s: solver_mode: GPU, but %s: training on the CPU (give --device cpu to choose it without this note)\n",
                config.source.c_str(), why.c_str());
  }
  return Device::cpu();
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
  int threads = args.get_int("threads", 0);
  if (threads < 0) fail<ConfigError>("--threads must be >= 0 (0 = all cores)");
  // More threads than cores only wait on each other (50x slower was seen with
  // 1000 on 2 cores): capped, with a note. Twice the cores still passes, for
  // machines whose cores the count misreads.
  const int cores = hardware_threads();
  if (threads > 2 * cores) {
    std::fprintf(stderr, "note: --threads %d on a machine with %d core%s: using %d\n", threads, cores,
                 cores == 1 ? "" : "s", cores);
    threads = cores;
  }
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
             {"weights", FlagKind::kValue, "initialise from a .safetensors or Caffe .caffemodel weights file", ""},
             {"snapshot", FlagKind::kValue, "resume from a .solverstate.safetensors snapshot", ""},
             {"overwrite", FlagKind::kSwitch,
              "replace the snapshots and log an earlier run left under the solver's snapshot_prefix", ""},
             {"reinit", FlagKind::kRepeated, "with --weights: layers (comma-separated) left as initialised",
              ""},
             {"weights-format", FlagKind::kValue,
              "names in the --weights file: auto, strata, torchvision-vgg, torchvision-vit, timm-vit, caffe", "auto"},
             {"freeze", FlagKind::kRepeated,
              "freeze layers whose names match (glob with * and ?, e.g. 'conv*'): lr_mult 0, no backward, "
              "BatchNorm on running statistics",
              ""},
             {"device", FlagKind::kValue, "cpu, cuda or cuda:N (builds with CUDA)",
              "the solver's solver_mode (GPU: cuda:<device_id> when there is one), else cpu"},
             {"threads", FlagKind::kValue, "CPU threads for GEMM and layer loops (0 = all cores)",
              "all cores"},
             {"dp-backend", FlagKind::kValue, "data parallel: communication backend (auto, tcp, nccl, mpi)",
              "solver's parallel block, else auto"},
             {"dp-algorithm", FlagKind::kValue, "data parallel: allreduce algorithm (auto, ring, tree)",
              "solver's parallel block, else auto"},
             {"dp-transport", FlagKind::kValue,
              "data parallel: transport of the tcp backend (auto, tcp, shm, rdma; rdma = libfabric)",
              "STRATA_DP_TRANSPORT (strata launch --dp-transport), else solver's parallel block, else auto"},
             {"bucket-mb", FlagKind::kValue, "data parallel: MiB of gradients per allreduce bucket",
              "solver's parallel block, else 25"},
             {"no-overlap", FlagKind::kSwitch, "data parallel: allreduce after backward instead of during it", ""},
             {"compression", FlagKind::kValue, "data parallel: gradients on the wire as NONE, FP16 or BF16",
              "solver's parallel block, else NONE"},
             {"shard", FlagKind::kValue,
              "data parallel: what each rank keeps only a slice of: NONE, OPTIMIZER (ZeRO-1), GRADIENTS (ZeRO-2) or PARAMETERS (ZeRO-3)",
              "solver's parallel block, else NONE"},
             {"pp", FlagKind::kValue, "pipeline parallel: stages (ranks per pipeline)", "solver's parallel block, else 1"},
             {"micro-batches", FlagKind::kValue, "pipeline parallel: micro-batches per step (the data layer's batch is one)",
              "solver's parallel block, else 1"},
             {"schedule", FlagKind::kValue, "pipeline parallel: gpipe or 1f1b", "solver's parallel block, else 1f1b"},
             {"tp", FlagKind::kValue, "tensor parallel: ranks per tensor-parallel group", "solver's parallel block, else 1"},
             {"ps-mode", FlagKind::kValue,
              "parameter server: SYNC, ASYNC or SSP (with strata launch --servers K, or COLOCATED)",
              "solver's parallel block, else no parameter server"},
             {"staleness", FlagKind::kValue, "parameter server, SSP: steps a worker may run ahead of the slowest",
              "solver's parallel block, else 3"},
             {"ps-placement", FlagKind::kValue, "parameter server: CENTRAL, SHARDED or COLOCATED",
              "from the server count: 0 COLOCATED, 1 CENTRAL, more SHARDED"},
             {"ps-servers", FlagKind::kValue,
              "parameter server: how many of the ranks (the last ones) are servers, under mpirun or srun",
              "strata launch --servers, else 0"},
             {"ps-compression", FlagKind::kValue, "parameter server: gradients on the wire as NONE, FP16 or BF16",
              "solver's parallel block, else NONE"},
             {"timeline", FlagKind::kValue,
              "write a Chrome trace (Perfetto, chrome://tracing) of every rank's layers, steps and communication",
              "none"},
             {"slowdown", FlagKind::kValue,
              "test knob: this rank computes F times slower (sleeps F-1 times each step's forward/backward)", "1"},
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
  if (config.max_iter == 0) {
    fail<ConfigError>(args.require("solver"), ": max_iter is 0 (a missing max_iter means 0): there is nothing to "
                      "train; set `max_iter: N`, the iteration to stop at");
  }
  const parallel::RankEnv env = parallel::detect_rank_env();
  if (env.rank == 0) {
    for (const std::string& line : config.notices) std::printf("note: %s\n", line.c_str());
  }
  parallel::TrainingRunOptions run;
  run.data = data_parallel_config(config, args);
  run.model = model_parallel_config(config, args);
  run.ps = parameter_server_config(config, args);
  run.timeline = args.get("timeline", "");
  if (!run.timeline.empty()) {
    // Checked now, not when the run ends: a folder that is missing, or a file
    // that is not an earlier trace, would lose the whole run's trace.
    const auto earlier_trace = [](const std::string& path) {
      std::FILE* f = std::fopen(path.c_str(), "rb");
      if (!f) return false;
      char head[48] = {};
      const size_t n = std::fread(head, 1, sizeof(head) - 1, f);
      std::fclose(f);
      return std::string(head, n).rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0) == 0;
    };
    check_output_path("--timeline", run.timeline,
                      {{"--solver", args.require("solver")}, {"--weights", args.get("weights", "")},
                       {"--snapshot", args.get("snapshot", "")}},
                      args.has("overwrite") ? Overwrite::kYes : Overwrite::kNo, earlier_trace);
  }
  if (args.has("slowdown")) run.slowdown = parallel::parse_slowdown(args.get("slowdown"), "--slowdown");
  if (args.has("max-memory")) set_memory_cap(parse_memory_size(args.get("max-memory"), "--max-memory"));
  // Several ranks on this host share its cores unless --threads says otherwise.
  if (!args.has("threads") && env.local_world_size > 1) {
    set_num_threads(std::max(1, hardware_threads() / env.local_world_size));
  }
  run.device = training_device(args, config, env);
  run.snapshot = args.get("snapshot", "");
  if (args.has("overwrite")) run.earlier_run = parallel::EarlierRunFiles::kReplace;
  if (args.has("freeze")) {
    std::vector<std::string> patterns;
    for (const std::string& p : split_list(args.get_all("freeze"))) patterns.push_back(p);
    run.freeze = [patterns](Net& net) { return transfer::freeze_layers(net, patterns, "--freeze").str(); };
  }
  if (args.has("weights")) {
    transfer::PretrainedOptions options;
    options.format = weights_format;
    options.reinit = split_list(args.get_all("reinit"));
    run.weights = args.get("weights");
    run.load_weights = [path = args.get("weights"), options](Net& net) {
      return transfer::load_pretrained(net, path, options).str();
    };
  }
  run.stop = &g_stop;
  const std::vector<int> stop_signals = stop_signals_from_env();
  for (int sig : stop_signals) std::signal(sig, on_stop_signal);
  const SolveResult result = parallel::run_training(config, run);
  for (int sig : stop_signals) std::signal(sig, SIG_DFL);
  if (result.status != SolveStatus::kInterrupted) return 0;
  // Another rank's signal (data parallel agrees on stopping) counts as Ctrl-C.
  const int sig = g_stop_signal.load();
  return 128 + (sig ? sig : SIGINT);
}

}  // namespace strata::cli
