// One training run, as `strata train` runs it: the solver, the strategies
// its ranks and settings call for, the console and the log, put together in
// the one order that works, so that the tool that calls it only parses flags.
//
//   TrainingRunOptions o;                       // from flags and the solver's parallel { } block
//   o.data = ...; o.model = ...; o.freeze = ...; o.load_weights = ...;
//   SolveResult r = run_training(config, o);
//
// What it does, in order (every step on every rank unless said):
//   1. ranks: one process, or N under `strata launch` / mpirun / srun
//      (parallel/rendezvous/env.h), their communicator, and their heartbeats
//      (parallel/rendezvous/heartbeat.h): an error on one rank is reported to
//      the store, and a failed, silent or vanished rank ends every rank;
//   2. model parallel (pp or tp > 1): the dp x pp x tp grid and this rank's
//      pipeline stage (parallel/model_parallel/model_parallel_run.h); else a Solver;
//   3. freeze (before any strategy lays out its gradient buckets);
//   4. resume from a snapshot, or load weights (rank 0, whose weights data
//      parallel then broadcasts; every rank of a model-parallel run, each
//      reading its own part);
//   5. data parallel over the grid's dp axis when it has more than one rank;
//   6. rank 0: the snapshot prefix locked (one run per prefix), debris of a
//      killed snapshot write removed, console and log; solve, per-rank
//      time and memory lines.
// A run never writes over its --weights file: one that is a snapshot of the
// run's own prefix is refused before anything starts; nor over an earlier
// run's snapshots and log (EarlierRunFiles).
// Strategies attach to the Solver through TrainingStrategy
// (framework/solver/training_strategy.h). With a parameter server (options.ps), step
// 1 opens the store without an allreduce communicator, server ranks serve
// their shard until the workers are done (ShardService), and step 5 attaches
// a ParameterServerWorker instead of data parallelism; workers have no
// heartbeat when servers are separate processes, so that a worker that dies
// does not end the job (a dead server still does).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "framework/tensor.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "parallel/parameter_server/ps_config.h"

namespace strata::parallel {

// What to do with the snapshots and log an earlier run left under the
// solver's snapshot_prefix when starting afresh (a run resumed with
// --snapshot continues: it appends to the log and keeps the files, and from
// an older snapshot than the newest it writes under a branch prefix,
// framework/io/snapshot_files.h ResumeBranch).
enum class EarlierRunFiles {
  kKeep,     // refuse to start, saying how to continue, replace or avoid them
  kReplace,  // --overwrite: delete them before starting
};

struct TrainingRunOptions {
  Device device;                   // where this rank's nets run (--device, resolved per local rank)
  DataParallelConfig data;         // used when there is more than one replica
  ModelParallelConfig model;       // pp and tp sizes, micro-batches, schedule
  // A parameter server instead of allreduce (ps.enabled): the ranks split
  // into workers and servers (parallel/parameter_server/ps_config.h).
  ParameterServerConfig ps;
  // --timeline: a Chrome trace of every rank's run written here by rank 0
  // (framework/timeline.h); "" for none.
  std::string timeline;
  // Test knob (--slowdown): this rank computes this many times slower (parallel/slowdown.h).
  double slowdown = 1.0;
  std::string snapshot;            // resume from this .solverstate.safetensors ("": start afresh)
  std::string weights;             // the file load_weights reads (never written over by this run)
  EarlierRunFiles earlier_run = EarlierRunFiles::kKeep;
  // Every rank, once the nets exist and before strategies lay out their
  // buffers: e.g. freezing layers. Returns a line for the console ("": none).
  std::function<std::string(Net&)> freeze;
  // When starting afresh, on the ranks that read weights (see above).
  // Returns a report for the console.
  std::function<std::string(Net&)> load_weights;
  // Set (by a signal handler) to stop after the current iteration, with a
  // snapshot; with several ranks every rank stops after the same iteration.
  const std::atomic<bool>* stop = nullptr;
};

// Trains to the solver's max_iter (or until stopped). Library errors
// (ConfigError, IoError, communication errors naming the rank) propagate.
SolveResult run_training(const SolverConfig& config, const TrainingRunOptions& options);

}  // namespace strata::parallel
