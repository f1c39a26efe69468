#include "parallel/training_run.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "framework/cpu/cpu_isa.h"
#include "framework/timeline.h"
#include "framework/error.h"
#include "framework/io/checkpoint.h"
#include "framework/io/file_util.h"
#include "framework/io/snapshot_files.h"
#include "framework/memory_cap.h"
#include "framework/cpu/threads.h"
#include "framework/solver/training_log.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#include "framework/cuda/runtime.h"
#endif
#include "parallel/backends/communicator_factory.h"
#include "parallel/backends/host_staging_communicator.h"
#include "parallel/backends/nccl_communicator.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/model_parallel/model_parallel_run.h"
#include "parallel/parameter_server/ps_log.h"
#include "parallel/parameter_server/ps_worker.h"
#include "parallel/parameter_server/shard_service.h"
#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/heartbeat.h"
#include "parallel/slowdown.h"
#include "parallel/socket/socket.h"

namespace strata::parallel {

namespace {

void print_resume(const ResumeInfo& info, int world_size) {
  std::printf("resumed from %s at iteration %lld\n", info.state_path.c_str(), static_cast<long long>(info.iter));
  if (info.config_changed) {
    if (info.settings_change.empty()) {
      std::printf("note: the solver settings differ from those of the run that wrote this snapshot\n");
    } else {
      std::printf("note: solver settings changed since the snapshot was written: %s\n", info.settings_change.c_str());
    }
  }
  if (info.snapshot_world_size != world_size) {
    std::printf("note: the snapshot was written by %d data-parallel rank%s and this run has %d; %s\n",
                info.snapshot_world_size, info.snapshot_world_size == 1 ? "" : "s", world_size,
                info.data_order_restarted ? "the data order restarts from the beginning of an epoch"
                                          : "each rank reads its own share of the data");
  }
}

void create_snapshot_folder(const std::string& prefix) {
  const std::string dir = dirname_of(prefix);
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail<IoError>("cannot create snapshot folder '", dir, "': ", ec.message());
}

// Per-rank time and memory (tools/bench/run_pipeline_bench.py reads these):
// every rank of a model-parallel run, in rank order; else rank 0.
void print_rank_summaries(const RankEnv& env, const ModelParallelRun& mp, Communicator* world) {
  if (env.rank != 0 && !mp.active()) return;
  for (int r = 0; r < (mp.active() && world ? world->world_size() : 1); ++r) {
    if (!mp.active() || r == env.rank) {
      if (mp.pipe) std::printf("%s\n", mp.pipe->times_line().c_str());
      std::printf("rank %d: peak tensor storage %s, in use at the end %s\n", env.rank,
                  format_bytes(memory_peak()).c_str(), format_bytes(memory_in_use()).c_str());
      std::fflush(stdout);
    }
    if (mp.active() && world) world->barrier();
  }
}

// Every rank's timeline events, gathered to rank 0, which writes the trace.
void write_timeline(const std::string& path, const RankEnv& env, Communicator* world) {
  const std::string mine = Timeline::take_events();
  if (!world || world->world_size() == 1) {
    Timeline::write_trace(path, {mine});
    std::printf("timeline: %s\n", path.c_str());
    return;
  }
  const int n = world->world_size();
  Tensor size(Shape{1}, DType::kI32), sizes(Shape{n}, DType::kI32);
  size.data<int32_t>()[0] = static_cast<int32_t>(mine.size());
  world->allgather(size, sizes);
  int32_t most = 1;
  for (int r = 0; r < n; ++r) most = std::max(most, sizes.data<int32_t>()[r]);
  Tensor one(Shape{most}, DType::kU8), all(Shape{env.rank == 0 ? int64_t{most} * n : int64_t{most} * n}, DType::kU8);
  std::memcpy(one.data<uint8_t>(), mine.data(), mine.size());
  world->gather(one, all, 0);
  if (env.rank != 0) return;
  std::vector<std::string> bodies;
  for (int r = 0; r < n; ++r) {
    bodies.emplace_back(reinterpret_cast<const char*>(all.data<uint8_t>()) + int64_t{most} * r,
                        static_cast<size_t>(sizes.data<int32_t>()[r]));
  }
  Timeline::write_trace(path, bodies);
  std::printf("timeline: %s (%d ranks)\n", path.c_str(), n);
}

// Under a parameter server no collective gathers the ranks' events (a worker
// may be gone): each rank writes its own trace, "t.json" -> "t.rank2.json".
void write_rank_timeline(const std::string& path, int rank) {
  if (path.empty()) return;
  const size_t dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && path.find('/', dot) == std::string::npos;
  const std::string mine = (has_ext ? path.substr(0, dot) : path) + ".rank" + std::to_string(rank) +
                           (has_ext ? path.substr(dot) : "");
  Timeline::write_trace(mine, {Timeline::take_events()});
  std::printf("timeline: %s\n", mine.c_str());
}

// Pipeline and tensor parallelism on GPUs run over nccl only: NCCL
// point-to-point between the stages and NCCL collectives in the groups.
void check_gpu_model_parallel(const TrainingRunOptions& options) {
  std::string flags;
  if (options.model.pipeline.stages > 1) flags += " --pp " + std::to_string(options.model.pipeline.stages);
  if (options.model.tensor_size > 1) flags += " --tp " + std::to_string(options.model.tensor_size);
  const std::string what = "--device " + options.device.str() + " with" + flags;
  const BackendChoice backend = options.data.backend;
  if (backend != BackendChoice::kAuto && backend != BackendChoice::kNccl) {
    fail<ConfigError>(what, " runs over the nccl backend (activations between the stages and the tensor-parallel "
                      "collectives stay on the GPUs), but --dp-backend is '", backend_choice_name(backend),
                      "'; use --dp-backend nccl (or leave it at auto), or train on the CPU with --device cpu");
  }
  if (options.data.transport != TransportChoice::kAuto) {
    fail<ConfigError>(what, " runs over the nccl backend, which moves its own bytes; --dp-transport '",
                      transport_choice_name(options.data.transport),
                      "' belongs to the tcp backend: leave it at auto, or use --device cpu");
  }
  if (!nccl_backend_built()) {
    fail<ConfigError>(what, " needs the nccl backend, and this strata was built without NCCL (it needs the CUDA "
                      "toolkit's nccl.h and libnccl.so, or $NCCL_ROOT, when cmake runs); rebuild with NCCL, or "
                      "use --device cpu");
  }
}

// The start lines of sharded data parallel: the slicing, and what each rank
// holds next to what plain data parallel would hold.
std::string shard_summary(const DataParallel& dp, Solver& solver) {
  const DataParallelConfig& c = dp.config();
  const std::vector<NetParam>& params = solver.net().params();
  const int world = dp.world_size();
  const int history_slots = static_cast<int>(make_optimizer(solver.config().optimizer)->slot_names().size());
  const char* kept = c.shard == ShardStage::kOptimizer   ? "optimizer state"
                     : c.shard == ShardStage::kGradients ? "optimizer state and reduced gradients"
                                                         : "optimizer state, reduced gradients and weights";
  std::string out = std::string("shard ") + shard_stage_name(c.shard) + ": rank r owns slice r of every bucket (" +
                    kept + "), the same on every rank:\n" + describe_slicing(dp.buckets(), params, world);
  const GradientSlotPlan& grad_slots = dp.sharded()->buffers().slots;
  out += "\n  the net's gradients: " +
         (grad_slots.reuse ? std::to_string(grad_slots.slot_numel.size()) + " bucket slots used in turn (" +
                            format_bytes(grad_slots.total_numel() * sizeof(float)) + ")"
                      : std::string("whole, a slot per bucket") +
                            (c.shard == ShardStage::kOptimizer ? "" : " (iter_size > 1: they add up over passes)"));
  const ShardedUpdate& sharded = *dp.sharded();
  for (int r = 0; r < world; ++r) out += "\n  rank " + std::to_string(r) + " holds " + memory_line(sharded.memory(r));
  // Plain data parallel reduces in the net's flat gradient buffer, where it has one.
  ShardBuffers plain;
  plain.compression = c.compression;
  plain.in_place = sharded.buffers().in_place && solver.config().blob_memory != BlobMemory::kSeparate;
  out += "\n  (plain data parallel: " +
         memory_line(memory_of(ShardStage::kNone, dp.buckets(), params, 0, world, plain, history_slots)) + ")";
  return out;
}

// A worker's view of the parameter server it trains against.
struct PsWorkerRun {
  ParameterServerConfig config;
  PsRoles roles;
  Store* store = nullptr;
};

// Everything after the ranks have met; `world` is null in one process and
// under a parameter server (`ps` set).
SolveResult train(const SolverConfig& given_config, const TrainingRunOptions& options, const RankEnv& env,
                  const std::unique_ptr<Communicator>& world, const PsWorkerRun* ps = nullptr) {
  const Device device = options.device;
  const bool lead = env.rank == 0;
  if (!options.weights.empty()) check_not_a_snapshot_of(options.weights, "--weights", given_config.snapshot_prefix);
  const bool resumed = !options.snapshot.empty();
  SolverConfig config = given_config;  // a resumed run's branch changes its prefix and log
  std::unique_ptr<SnapshotPrefixLock> lock;
  ResumeBranch branch;
  int64_t resumed_from = -1;  // the snapshot's iteration (lead rank)
  EarlierRun earlier;  // replaced (--overwrite) only once the run is set up
  if (lead) {
    create_snapshot_folder(config.snapshot_prefix);
    lock = std::make_unique<SnapshotPrefixLock>(config.snapshot_prefix);
    if (const int n = remove_snapshot_debris(config.snapshot_prefix)) {
      std::printf("removed %d unfinished snapshot file%s left by an interrupted run of '%s'\n", n, n == 1 ? "" : "s",
                  config.snapshot_prefix.c_str());
    }
    if (resumed) {
      // A resumed run continues: it appends to the log and numbers its
      // snapshots on from the state's iteration; from an older snapshot than
      // the prefix's newest it branches, so those stay as they are (--overwrite
      // does not change that). Only the lead rank writes snapshots and the log
      // (a pipeline's stage 0 and a parameter server's worker 0 are rank 0),
      // so only its prefix changes.
      resumed_from = solver_state_iter(options.snapshot);
      branch = branch_for_resume(config.snapshot_prefix, config.log, resumed_from);
      if (branch.taken()) {
        std::printf("note: %s\n", branch.note(config.snapshot_prefix, resumed_from).c_str());
        config.snapshot_prefix = branch.prefix;
        config.log = branch.log;
        remove_snapshot_debris(config.snapshot_prefix);  // of a branch killed before its first snapshot
      }
    } else {
      earlier = find_earlier_run(config.snapshot_prefix, config.log);
      if (options.earlier_run == EarlierRunFiles::kKeep) check_no_earlier_run(earlier, config.snapshot_prefix);
    }
  }
  SolverOptions solver_options;
  solver_options.rank = env.rank;
  solver_options.world_size = ps ? ps->roles.workers : env.world_size;
  solver_options.comm = world.get();
  // Under a parameter server only worker 0 tests, on the whole TEST set.
  if (ps) solver_options.test_data = TestData::kWhole;
  solver_options.snapshots = lead ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
  solver_options.device = device;

  // 2. Pipeline / tensor parallelism: the grid and this rank's stage, which
  // builds only its own layers.
  ModelParallelRun mp = start_model_parallel(config, options.model, env, world.get(), solver_options, std::cout);
  std::unique_ptr<Solver> own_solver;
  if (!mp.pipe) own_solver = std::make_unique<Solver>(config, solver_options);
  Solver& solver = mp.pipe ? mp.pipe->solver() : *own_solver;
  // Under a pipeline every stage's memory, gathered to rank 0.
  const std::string net_memory =
      mp.pipe ? pipeline_memory_summary(mp, *world) : memory_report({&solver.net(), solver.test_net()}).str();
  if (lead) {
    std::printf("strata train: %s, %d threads (CPU kernels: %s), net '%s' (%s)\n", config.source.c_str(),
                num_threads(), cpu_isa_name(cpu_isa()), solver.net().name().c_str(), net_memory.c_str());
  }

  // 3. Every rank freezes the same layers, before the optimizer history and
  // the data-parallel buckets are laid out.
  if (options.freeze) {
    const std::string line = options.freeze(solver.net());
    solver.optimizer().prepare(solver.net().params());
    if (lead && !line.empty()) std::printf("%s\n", line.c_str());
  }
  if (lead && solver.net().blob_plan().planned > 0) std::printf("%s\n", solver.net().blob_plan().str().c_str());
  if (lead && (solver.net().storage_report().reduced > 0 || solver.net().storage_report().channels_last > 0)) {
    std::printf("%s\n", solver.net().storage_report().str().c_str());
  }
  if (lead && device.is_cpu() && solver.net().storage_report().channels_last > 0) {
    std::printf("note: channels_last on the CPU gives the NCHW results through gathers, about a fifth slower "
                "(docs/benchmarks.md); it is meant for tensor-core convolutions on a GPU\n");
  }
  if (lead && !solver.net().fusion_report().empty()) std::printf("%s\n", solver.net().fusion_report().c_str());

  // 4. Every rank reads the same snapshot (a pipeline stage restores its
  // part). Weights: rank 0 reads them and data parallelism broadcasts them;
  // pipeline stages read their own layers, tensor-parallel ranks their blocks.
  if (resumed) {
    const ResumeInfo info = mp.pipe ? mp.pipe->restore(options.snapshot) : solver.restore(options.snapshot);
    if (lead) print_resume(info, solver.options().world_size);
  } else if (options.load_weights && (lead || mp.active())) {
    std::printf("%s\n", options.load_weights(solver.net()).c_str());
    for (const NetParam& p : solver.net().params()) {
      if (const int64_t n = count_nonfinite(p.blob->data)) {
        fail<NumericError>("--weights ", options.weights, ": parameter '", p.name, "' holds ", n, " inf/NaN value",
                           n == 1 ? "" : "s", " of ", p.blob->numel(),
                           " after loading; training from it would only produce NaN. Use a weights file "
                           "with finite values (or --reinit the layer to start it afresh)");
      }
    }
  }

  // 5. Data parallelism over the replicas (the grid's dp axis).
  solver.set_stop_flag(options.stop);
  Communicator* dp_comm = mp.active() ? (mp.dp_comm()->world_size() > 1 ? mp.dp_comm() : nullptr) : world.get();
  if (mp.active() && !dp_comm && options.data.shard != ShardStage::kNone && lead) {
    std::printf("note: shard %s slices state over data-parallel ranks; this grid has one (dp 1), which holds "
                "everything (more ranks than --pp x --tp make a dp axis)\n", shard_stage_name(options.data.shard));
  }
  // Before the strategies that talk to other ranks: it times this rank's passes alone.
  std::unique_ptr<Slowdown> slowdown;
  if (options.slowdown > 1.0) slowdown = std::make_unique<Slowdown>(solver, options.slowdown);
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<ParameterServerWorker> psw;
  if (ps) {
    psw = std::make_unique<ParameterServerWorker>(solver, *ps->store, ps->config, ps->roles, env.rank, env);
    if (lead) {
      std::printf("parameter server: %s, over %s\n%s\n",
                  ps->config.summary(ps->roles.workers, ps->roles.shards).c_str(), psw->link_description().c_str(),
                  psw->ownership_lines().c_str());
    }
  } else if (dp_comm) {
    dp = std::make_unique<DataParallel>(solver, *dp_comm, options.data);
    if (mp.pipe) dp->add_stage_nets(mp.pipe->stage_nets());  // its micro-batches' copies gather too
    if (lead) {
      const std::string transport = communicator_transport_name(*dp_comm);
      std::printf("data parallel: %d ranks, %s backend%s, %s, %zu gradient bucket%s\n", dp_comm->world_size(),
                  world->backend_name().c_str(), transport.empty() ? "" : (" over " + transport).c_str(),
                  options.data.summary().c_str(), dp->buckets().size(), dp->buckets().size() == 1 ? "" : "s");
      if (dp->sharded()) std::printf("%s\n", shard_summary(*dp, solver).c_str());
    }
  }

  // 6. Rank 0 prints, logs and writes snapshots.
  std::unique_ptr<TrainingObserver> console;
  std::unique_ptr<JsonLinesLog> log;
  std::unique_ptr<ParameterServerLog> ps_log;
  std::unique_ptr<SnapshotAnnouncer> announcer;
  if (lead) {
    if (const int n = earlier.empty() ? 0 : remove_earlier_run(earlier)) {
      std::printf("removed %d file%s of an earlier run under '%s' (--overwrite)\n", n, n == 1 ? "" : "s",
                  config.snapshot_prefix.c_str());
    }
    if (psw) {
      console = std::make_unique<ParameterServerConsole>(std::cout, *psw);
    } else if (dp) {
      console = std::make_unique<DataParallelConsole>(std::cout, *dp);
    } else {
      console = std::make_unique<ConsolePrinter>(std::cout);
    }
    log = std::make_unique<JsonLinesLog>(config.log, resumed ? LogMode::kAppend : LogMode::kTruncate);
    solver.add_observer(console.get());
    solver.add_observer(log.get());
    if (psw) {
      ps_log = std::make_unique<ParameterServerLog>(*psw, *log);
      solver.add_observer(ps_log.get());
      announcer = std::make_unique<SnapshotAnnouncer>(*ps->store);
      solver.add_observer(announcer.get());
    }
    // FP16 loss-scale overflows: the step is skipped and the console says so.
    solver.set_notice_sink([](const std::string& msg) { std::printf("note: %s\n", msg.c_str()); });
    if (!device.is_cpu()) std::printf("device %s, precision %s\n", device.str().c_str(), precision_name(config.precision));
  }
  SolveResult result = solver.solve();
  // A best snapshot from before the branch point lies under the given prefix.
  if (branch.taken() && result.best_iter >= 0 && result.best_iter <= resumed_from) {
    result.best_weights = snapshot_paths(given_config.snapshot_prefix, result.best_iter).weights;
  }
  if (!ps) print_rank_summaries(env, mp, world.get());
  if (!options.timeline.empty() && !ps) write_timeline(options.timeline, env, world.get());
  if (lead) {
    std::printf("log: %s\n", log->path().c_str());
    if (!result.last_snapshot.empty()) std::printf("snapshot: %s\n", result.last_snapshot.c_str());
    if (result.best_iter >= 0) {
      std::printf("best %s %g at iteration %lld: %s\n", config.snapshot_best.c_str(), result.best_value,
                  static_cast<long long>(result.best_iter), result.best_weights.c_str());
    }
    if (solver.nonfinite_skipped() > 0) {
      std::printf("%lld update(s) skipped for a non-finite loss or gradient (nonfinite: SKIP)\n",
                  static_cast<long long>(solver.nonfinite_skipped()));
    }
#ifdef STRATA_WITH_CUDA
    if (!device.is_cpu()) {
      std::printf("GPU memory: %s\n", cuda::memory_report(device.index).c_str());
      std::printf("%s\n", cuda::memory_stats(device.index).peak_line().c_str());
      if (const LossScaler* ls = solver.loss_scaler()) {
        std::printf("loss scale %g, %lld update(s) skipped for overflow\n", ls->scale(),
                    static_cast<long long>(ls->skipped_steps()));
      }
    }
#endif
  }
  return result;
}

// A run whose ranks are parameter-server workers and servers.
SolveResult run_with_parameter_server(const SolverConfig& config, const TrainingRunOptions& options,
                                      const RankEnv& env) {
  PsWorkerRun ps;
  ps.config = options.ps;
  ps.config.transport = options.data.transport;
  ps.roles = resolve_ps_roles(ps.config, env.world_size);
  if (options.model.pipeline.stages > 1 || options.model.tensor_size > 1) {
    fail<ConfigError>("a parameter server does not combine with pipeline or tensor parallelism yet; drop --pp/--tp "
                      "or the parameter server");
  }
  std::shared_ptr<StoreServer> store_server;
  const std::shared_ptr<Store> store = open_rank_store(env, "the parameter server", store_server);
  ps.store = store.get();
  const int shard = ps.roles.shard_of(env.rank);
  const bool server_process = !ps.roles.is_worker(env.rank);
  // Every rank beats, so that a stopped or hung one is named within the
  // heartbeat limit. A worker that dies must not end the job: one that holds
  // no shard and is not worker 0 beats as a rank the job can lose (it is
  // dropped, and strata launch kills it if it is stopped); the servers, a
  // colocated worker (its shard dies with it) and worker 0 (which tests, logs
  // and writes the snapshots) fail the job when lost.
  const IfLost if_lost = shard < 0 && env.rank != 0 ? IfLost::kDropRank : IfLost::kFailJob;
  const std::unique_ptr<Heartbeat> heartbeat =
      start_heartbeat(env, "strata train", if_lost, [roles = ps.roles](const std::string& message) {
        return roles.name_servers(message);
      });
  try {
    std::unique_ptr<ShardService> service;
    if (shard >= 0) service = std::make_unique<ShardService>(config, ps.config, ps.roles, shard, env);
    if (server_process) {
      std::printf("%s: serving shard %d of %d for %d worker%s (%s)\n", service->who().c_str(), shard,
                  ps.roles.shards, ps.roles.workers, ps.roles.workers == 1 ? "" : "s", ps_mode_name(ps.config.mode));
      std::fflush(stdout);
      service->wait();
      std::printf("%s\n", service->summary().c_str());
      write_rank_timeline(options.timeline, env.rank);
      if (service->lost_workers() == ps.roles.workers) {
        fail<JobFailedError>(service->who(), ": every worker was lost; nothing is left to train");
      }
      return SolveResult{};
    }
    SolveResult result = train(config, options, env, nullptr, &ps);
    if (service) {
      service->wait();
      std::printf("%s\n", service->summary().c_str());
    }
    write_rank_timeline(options.timeline, env.rank);
    return result;
  } catch (const JobFailedError& e) {
    throw JobFailedError(ps.roles.name_servers(e.what()));  // the store names ranks only
  } catch (const NetworkError& e) {
    // A lost server, or worker 0 gone: name the failure the store recorded.
    const std::string cause = heartbeat ? heartbeat->report_failure(e.what(), FailureOrigin::kCommunication) : "";
    if (!cause.empty()) throw JobFailedError(ps.roles.name_servers(cause) + " (seen here as: " + e.what() + ")");
    throw;
  } catch (const std::exception& e) {
    if (heartbeat) heartbeat->report_failure(e.what(), FailureOrigin::kThisRank);
    throw;
  }
}

}  // namespace

SolveResult run_training(const SolverConfig& config, const TrainingRunOptions& options) {
  const RankEnv env = detect_rank_env();
  if (!options.timeline.empty()) Timeline::start(env.rank, "rank " + std::to_string(env.rank));
  if (options.ps.enabled && options.data.shard != ShardStage::kNone) {
    fail<ConfigError>("shard ", shard_stage_name(options.data.shard), " (--shard or parallel { data { shard } }) "
                      "slices data parallel's optimizer state; a parameter server keeps the optimizer on its "
                      "servers already: drop one of them");
  }
  if (options.ps.enabled && env.distributed()) return run_with_parameter_server(config, options, env);
  if (options.data.shard != ShardStage::kNone && !env.distributed()) {
    std::printf("note: shard %s slices state over data-parallel ranks (strata launch --nproc N -- strata train "
                "...); this one process holds everything\n", shard_stage_name(options.data.shard));
  }
  if (options.ps.enabled) {
    std::printf("note: the parameter server needs several ranks (strata launch --nproc N --servers K -- strata "
                "train ...); training in this one process\n");
  }
  const bool model_parallel = options.model.pipeline.stages > 1 || options.model.tensor_size > 1;
  if (env.distributed() && !options.device.is_cpu() && model_parallel) check_gpu_model_parallel(options);
  // 1. With a GPU, backend auto is nccl (when built with it): the gradients
  // are reduced on the device; tcp and mpi stage them through host memory.
  std::unique_ptr<Communicator> world;
  if (env.distributed()) {
    world = create_communicator(env, {options.data.backend, options.data.algorithm, options.device,
                                      options.data.transport});
    // The model-parallel strategies' control messages (shapes, losses,
    // snapshot parts) are host tensors: nccl takes them through its GPU.
    if (model_parallel && world->backend() == CommBackend::kNccl) {
      world = std::make_unique<DeviceStagingCommunicator>(std::move(world), options.device);
    }
  }
  // A rank that fails, stops or hangs ends every rank within seconds, named
  // (parallel/rendezvous/heartbeat.h); destroyed before `world`, whose store
  // server (on rank 0) waits for every rank's goodbye.
  const std::unique_ptr<Heartbeat> heartbeat = start_heartbeat(env, "strata train");
  try {
    return train(config, options, env, world);
  } catch (const JobFailedError&) {
    throw;  // another rank's failure, already recorded
  } catch (const NetworkError& e) {
    // Usually the echo of the other rank's failure: name that failure.
    const std::string cause = heartbeat ? heartbeat->report_failure(e.what(), FailureOrigin::kCommunication) : "";
    if (!cause.empty()) throw JobFailedError(cause + " (seen here as: " + e.what() + ")");
    throw;
  } catch (const std::exception& e) {
    if (heartbeat) heartbeat->report_failure(e.what(), FailureOrigin::kThisRank);
    throw;
  }
}

}  // namespace strata::parallel
