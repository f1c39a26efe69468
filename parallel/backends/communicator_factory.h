// Builds the Communicator a process should use, from its rank environment
// (parallel/rendezvous/env.h) and the user's choice of backend and algorithm.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/store.h"
#include "parallel/transport/transport_select.h"

namespace strata::parallel {

// The backend a user asks for. auto: local for a world of one rank; nccl
// when the tensors are on a CUDA device and the build has NCCL; tcp
// otherwise. A world of one rank always gets the local communicator.
enum class BackendChoice { kAuto, kTcp, kNccl, kMpi, kLocal };
const std::vector<std::string>& backend_choice_names();  // auto, tcp, nccl, mpi, local
// ConfigError naming `where` and the known names on anything else.
BackendChoice parse_backend_choice(const std::string& text, const std::string& where);
const char* backend_choice_name(BackendChoice choice);

// Parsed where the user's configuration is read (the solver file, the
// command line); the factory and the backends see only these values.
struct CommunicatorOptions {
  BackendChoice backend = BackendChoice::kAuto;
  // Allreduce algorithm of the tcp backend (tree for small messages and
  // ring for large ones under auto).
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  // Where the tensors to communicate live: picks the auto backend, and the
  // nccl backend's CUDA device (a CPU device: the current CUDA device).
  Device device = Device::cpu();
  // Transport of the tcp backend. Anything but auto also makes the auto
  // backend tcp, since only the tcp backend has transports.
  TransportChoice transport = TransportChoice::kAuto;
};

// tcp and nccl: rank 0 serves the store on env.master_port (on 127.0.0.1
// when the master host is a loopback address, on every interface otherwise)
// unless env.store_host says the launcher serves it already; every rank
// joins it with env.token. tcp: the ranks exchange listening
// addresses through it and connect to each other; nccl: rank 0's NCCL unique
// id goes through it. The communicator owns the store client and rank 0's
// server. Everything waits at most env.timeout; errors
// name this rank and host. ConfigError for a transport with a backend that
// has none, and for local with more than one rank. tcp and mpi come
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
