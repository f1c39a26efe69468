// Which transport carries the bytes of the tcp backend's collectives, per
// peer: `transport:` in the solver's parallel { data { } } block,
// --dp-transport of strata train and strata launch.
//
//   tcp   TCP sockets to every peer
//   shm   shared-memory rings to peers on the same host, TCP to the others
//   rdma  libfabric to every peer (fabric_transport.h): the verbs provider
//         (InfiniBand, RoCE), or the provider STRATA_FABRIC_PROVIDER names
//   auto  rdma between hosts when every rank finds an RDMA device (libfabric's
//         verbs provider), shared memory on one host, TCP otherwise;
//         STRATA_SHM=0 turns shared memory off
//
// Every choice keeps the TCP connections: they carry the bytes when nothing
// else does, and otherwise tell a waiting rank at once that a peer died.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "parallel/transport/transport.h"

namespace strata::parallel {

enum class TransportChoice { kAuto, kTcp, kShm, kRdma };

const std::vector<std::string>& transport_choice_names();  // auto, tcp, shm, rdma
// ConfigError naming `where` and the known names on anything else.
TransportChoice parse_transport_choice(const std::string& text, const std::string& where);
const char* transport_choice_name(TransportChoice choice);

struct TransportSetup {
  TransportChoice choice = TransportChoice::kAuto;
  std::string hostname;        // this machine's name in messages; "" = gethostname()
  std::string advertise_host;  // the address peers reach this rank on; "" = the first non-loopback one
  std::string fabric_provider;  // "" = STRATA_FABRIC_PROVIDER, else verbs
  // Store keys live under "<prefix>/tcp", "<prefix>/fabric", "<prefix>/shm",
  // so that several worlds (a parameter server's pairs) can meet in one store.
  std::string prefix = "strata";
};

// Connects every rank of the world (all must call it with the same choice)
// through the store, under "<prefix>/tcp", "<prefix>/fabric" and "<prefix>/shm".
std::unique_ptr<Transport> connect_transport(Store& store, int rank, int world_size, std::chrono::milliseconds timeout,
                                             const TransportSetup& setup);

// "tcp", "tcp + shm (3 peers)", "rdma (verbs;ofi_rxm)": what connect_transport built.
std::string describe_transport(const Transport& t);

}  // namespace strata::parallel
