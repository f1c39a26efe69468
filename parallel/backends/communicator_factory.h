// Builds the Communicator a process should use, from its rank environment
// (parallel/rendezvous/env.h) and the user's choice of backend and algorithm.
#pragma once

#include <memory>
#include <string>

#include "framework/communicator.h"
#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/store.h"

namespace strata::parallel {

struct CommunicatorOptions {
  // "tcp", "nccl", "mpi", "local" or "auto". auto: local for a world of one
  // rank; nccl when `device` is a CUDA device and the build has NCCL; tcp
  // otherwise. A world of one rank always gets the local communicator.
  std::string backend = "auto";
  // Allreduce algorithm of the tcp backend: "ring", "tree" or "auto" (tree
  // for small messages, ring for large ones).
  std::string algorithm = "auto";
  // Where the tensors to communicate live: picks the auto backend, and the
  // nccl backend's CUDA device (a CPU device: the current CUDA device).
  Device device = Device::cpu();
  // Transport of the tcp backend: "auto", "tcp", "shm" or "rdma"
  // (parallel/transport/transport_select.h). Anything but auto also makes
  // the auto backend tcp, since only the tcp backend has transports.
  std::string transport = "auto";
};

// tcp and nccl: rank 0 serves the store on env.master_port (on 127.0.0.1
// when the master host is a loopback address, on every interface otherwise)
// unless env.store_host says the launcher serves it already; every rank
// joins it with env.token. tcp: the ranks exchange listening
// addresses through it and connect to each other; nccl: rank 0's NCCL unique
// id goes through it. The communicator owns the store client and rank 0's
// server. Everything waits at most env.timeout; errors
// name this rank and host. ConfigError for unknown names. tcp and mpi come
// wrapped in HostStagingCommunicator: they also take CUDA tensors, through
// host copies.
std::unique_ptr<Communicator> create_communicator(const RankEnv& env, const CommunicatorOptions& opts);

// Joins the run's rendezvous store (serving it first on rank 0 when the
// launcher does not: `server` is then set and must outlive every rank's use
// of it). `what` ("the tcp backend") names the user in errors about a missing
// STRATA_MASTER or STRATA_TOKEN. For strategies that talk to the store
// themselves (a parameter server).
std::shared_ptr<Store> open_rank_store(const RankEnv& env, const char* what, std::shared_ptr<StoreServer>& server);

}  // namespace strata::parallel
