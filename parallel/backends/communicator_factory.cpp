#include "parallel/backends/communicator_factory.h"

#include <memory>
#include <utility>

#include "framework/error.h"
#include "parallel/backends/host_staging_communicator.h"
#include "parallel/backends/nccl_communicator.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/transport/tcp_transport.h"
#include "parallel/transport/transport_select.h"

#if __has_include("parallel/backends/mpi_communicator.h")
#include "parallel/backends/mpi_communicator.h"
#define STRATA_FACTORY_HAS_MPI_HEADER 1
#endif

namespace strata::parallel {

namespace {

// Rank 0 serves the store unless the launcher already does (server is null
// elsewhere); every rank joins it.
void open_store(const RankEnv& env, const char* backend, std::shared_ptr<StoreServer>& server,
                std::shared_ptr<Store>& store) {
  if (env.master_host.empty() || env.master_port <= 0) {
    fail<ConfigError>(env.describe(), ": the ", backend, " backend needs rank 0's store address: set "
                      "STRATA_MASTER=host:port (strata launch does; with mpirun pass -x STRATA_MASTER "
                      "-x STRATA_TOKEN)");
  }
  if (env.token.empty()) {
    fail<ConfigError>(env.describe(), ": the ", backend, " backend needs the shared STRATA_TOKEN for joining rank 0's "
                      "store (strata launch sets it; otherwise export the same value on every rank)");
  }
  if (env.rank == 0 && env.store_host == StoreHost::kRankZero) {
    const std::string bind = is_loopback_host(env.master_host) ? "127.0.0.1" : "0.0.0.0";
    server = std::make_shared<StoreServer>(bind, env.master_port, env.token);
  }
  store = connect_store(env.master_host, env.master_port, env.token, env.rank, env.timeout);
}

std::unique_ptr<Communicator> create_nccl(const RankEnv& env, const CommunicatorOptions& opts) {
  if (!nccl_backend_built()) create_nccl_communicator(env, nullptr);  // throws the ConfigError that says why
  std::shared_ptr<StoreServer> server;
  std::shared_ptr<Store> store;
  open_store(env, "nccl", server, store);
  NcclCommunicatorOptions nccl_opts;
  if (opts.device.kind == DeviceKind::kCUDA) nccl_opts.device = opts.device.index;
  nccl_opts.keep_alive.push_back(store);
  if (server) nccl_opts.keep_alive.push_back(server);
  return create_nccl_communicator(env, store, std::move(nccl_opts));
}

std::unique_ptr<Communicator> create_tcp(const RankEnv& env, const CommunicatorOptions& opts) {
  TcpCommunicatorOptions tcp_opts;
  tcp_opts.algorithm = opts.algorithm;
  tcp_opts.hostname = env.hostname;
  std::shared_ptr<StoreServer> server;
  std::shared_ptr<Store> store;
  open_store(env, "tcp", server, store);
  TransportSetup setup;
  setup.choice = opts.transport;
  setup.hostname = env.hostname;
  // Advertise the interface that reaches the master: the one the other
  // ranks can reach us on, too, in the usual single-network cluster.
  setup.advertise_host = local_address_towards(env.master_host, env.master_port);
  // Per peer: shared memory on this host, rdma between hosts with an RDMA
  // device, TCP otherwise (auto), or what the user chose.
  std::unique_ptr<Transport> transport = connect_transport(*store, env.rank, env.world_size, env.timeout, setup);
  auto comm = std::make_unique<TcpCommunicator>(std::move(transport), tcp_opts);
  comm->hold(store);
  if (server) comm->hold(server);
  comm->set_timeout(env.timeout);
  return comm;
}

}  // namespace

const std::vector<std::string>& backend_choice_names() {
  static const std::vector<std::string> names = {"auto", "tcp", "nccl", "mpi", "local"};
  return names;
}

BackendChoice parse_backend_choice(const std::string& text, const std::string& where) {
  const std::vector<std::string>& names = backend_choice_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) return static_cast<BackendChoice>(i);
  }
  fail<ConfigError>(where, ": unknown communication backend '", text, "'; known: auto, tcp, nccl, mpi, local");
}

const char* backend_choice_name(BackendChoice choice) {
  return backend_choice_names()[static_cast<size_t>(choice)].c_str();
}

std::shared_ptr<Store> open_rank_store(const RankEnv& env, const char* what, std::shared_ptr<StoreServer>& server) {
  std::shared_ptr<Store> store;
  open_store(env, what, server, store);
  return store;
}

std::unique_ptr<Communicator> create_communicator(const RankEnv& env, const CommunicatorOptions& opts) {
  const BackendChoice backend = opts.backend;
  const TransportChoice transport = opts.transport;
  if (transport != TransportChoice::kAuto && (backend == BackendChoice::kNccl || backend == BackendChoice::kMpi)) {
    const char* name = backend_choice_name(backend);
    fail<ConfigError>("transport '", transport_choice_name(transport), "' belongs to the tcp backend, but the backend "
                      "is '", name, "' (", name, " moves its own bytes); use backend tcp (or auto), or transport auto");
  }
  if (env.world_size <= 1) return std::make_unique<LocalCommunicator>();
  if (backend == BackendChoice::kLocal) {
    fail<ConfigError>(env.describe(), ": backend 'local' serves a world of one rank only; use tcp, nccl or mpi for ",
                      env.world_size, " ranks");
  }
  // auto: NCCL for CUDA tensors where this build has it.
  if (backend == BackendChoice::kNccl ||
      (backend == BackendChoice::kAuto && transport == TransportChoice::kAuto &&
       opts.device.kind == DeviceKind::kCUDA && nccl_backend_built())) {
    return create_nccl(env, opts);
  }
  if (backend == BackendChoice::kMpi) {
#ifdef STRATA_FACTORY_HAS_MPI_HEADER
    return std::make_unique<HostStagingCommunicator>(create_mpi_communicator(env));
#else
    fail<ConfigError>(env.describe(), ": this build has no MPI backend (install libopenmpi-dev and rebuild)");
#endif
  }
  return std::make_unique<HostStagingCommunicator>(create_tcp(env, opts));
}

}  // namespace strata::parallel
