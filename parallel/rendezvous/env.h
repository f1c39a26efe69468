// Who am I in a multi-process run? Read from the environment that
// `strata launch`, `mpirun` (OpenMPI) or `srun` (SLURM) sets up.
#pragma once

#include <chrono>
#include <string>

namespace strata::parallel {

// Who serves the rendezvous store at STRATA_MASTER: rank 0 (mpirun, srun,
// multi-node `strata launch --master`), or a process that started before the
// ranks and already listens there (single-node `strata launch`, which binds
// port 0 and so never races another launch for a port).
enum class StoreHost { kRankZero, kLauncher };

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_host;   // where rank 0 serves the store ("" when world_size == 1)
  int master_port = 0;
  std::string token;         // shared secret for joining the store
  StoreHost store_host = StoreHost::kRankZero;  // STRATA_STORE_HOST
  std::string launcher;      // "strata", "mpirun", "srun" or "none"
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // STRATA_TIMEOUT_S
  // Liveness (parallel/rendezvous/heartbeat.h): every rank tells the store it
  // is alive this often, and a rank silent for heartbeat_timeout fails the
  // job naming it (0: no heartbeats).
  std::chrono::milliseconds heartbeat_interval{1000};  // STRATA_HEARTBEAT_S
  std::chrono::milliseconds heartbeat_timeout{5000};   // STRATA_HEARTBEAT_TIMEOUT_S
  std::string hostname;      // this machine

  bool distributed() const { return world_size > 1; }
  // "rank 2 of 4 on host-a"
  std::string describe() const;
};

// Environment variables read, in order of precedence:
//   strata launch:  STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK,
//                   STRATA_LOCAL_WORLD_SIZE, STRATA_MASTER (host:port), STRATA_TOKEN,
//                   STRATA_STORE_HOST ("rank0", the default, or "launcher")
//   mpirun:         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                   OMPI_COMM_WORLD_LOCAL_SIZE (plus STRATA_MASTER, STRATA_TOKEN from -x)
//   srun:           SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   always:         STRATA_TIMEOUT_S (seconds; default 300), STRATA_HEARTBEAT_S
//                   (seconds, decimals allowed; default 1), STRATA_HEARTBEAT_TIMEOUT_S
//                   (seconds; default 5; 0 turns heartbeats off; at least twice
//                   STRATA_HEARTBEAT_S)
// Throws ConfigError naming the variable when a value is malformed, or when
// a multi-rank run has no STRATA_MASTER / STRATA_TOKEN.
RankEnv detect_rank_env();

}  // namespace strata::parallel
