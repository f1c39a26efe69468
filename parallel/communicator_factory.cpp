#include "parallel/communicator_factory.h"

#include <memory>
#include <utility>

#include "framework/error.h"
#include "parallel/store.h"
#include "parallel/tcp_communicator.h"
#include "parallel/tcp_transport.h"

#if __has_include("parallel/mpi_communicator.h")
#include "parallel/mpi_communicator.h"
#define STRATA_FACTORY_HAS_MPI_HEADER 1
#endif

namespace strata::parallel {

namespace {

std::unique_ptr<Communicator> create_tcp(const RankEnv& env, const CommunicatorOptions& opts) {
  TcpCommunicatorOptions tcp_opts;
  tcp_opts.algorithm = parse_allreduce_algorithm(opts.algorithm);
  tcp_opts.hostname = env.hostname;
  if (env.master_host.empty() || env.master_port <= 0) {
    fail<ConfigError>(env.describe(), ": the tcp backend needs rank 0's store address: set STRATA_MASTER=host:port "
                      "(strata launch does; with mpirun pass -x STRATA_MASTER -x STRATA_TOKEN)");
  }
  if (env.token.empty()) {
    fail<ConfigError>(env.describe(), ": the tcp backend needs the shared STRATA_TOKEN for joining rank 0's store "
                      "(strata launch sets it; otherwise export the same value on every rank)");
  }
  std::shared_ptr<StoreServer> server;
  if (env.rank == 0) {
    const std::string bind = is_loopback_host(env.master_host) ? "127.0.0.1" : "0.0.0.0";
    server = std::make_shared<StoreServer>(bind, env.master_port, env.token);
  }
  std::shared_ptr<Store> store = connect_store(env.master_host, env.master_port, env.token, env.rank, env.timeout);
  TcpTransportOptions transport_opts;
  transport_opts.hostname = env.hostname;
  // Advertise the interface that reaches the master: the one the other
  // ranks can reach us on, too, in the usual single-network cluster.
  transport_opts.advertise_host = local_address_towards(env.master_host, env.master_port);
  auto transport = connect_tcp_transport(*store, env.rank, env.world_size, "strata/tcp", env.timeout, transport_opts);
  auto comm = std::make_unique<TcpCommunicator>(std::move(transport), tcp_opts);
  comm->hold(store);
  if (server) comm->hold(server);
  comm->set_timeout(env.timeout);
  return comm;
}

}  // namespace

std::unique_ptr<Communicator> create_communicator(const RankEnv& env, const CommunicatorOptions& opts) {
  const std::string& backend = opts.backend;
  if (backend != "auto" && backend != "tcp" && backend != "mpi" && backend != "local") {
    fail<ConfigError>("unknown communication backend '", backend, "'; known: auto, tcp, mpi, local");
  }
  parse_allreduce_algorithm(opts.algorithm);  // reject a bad name even where it is not used
  if (env.world_size <= 1) return std::make_unique<LocalCommunicator>();
  if (backend == "local") {
    fail<ConfigError>(env.describe(), ": backend 'local' serves a world of one rank only; use tcp or mpi for ",
                      env.world_size, " ranks");
  }
  if (backend == "mpi") {
#ifdef STRATA_FACTORY_HAS_MPI_HEADER
    return create_mpi_communicator(env);
#else
    fail<ConfigError>(env.describe(), ": this build has no MPI backend (install libopenmpi-dev and rebuild)");
#endif
  }
  return create_tcp(env, opts);
}

}  // namespace strata::parallel
