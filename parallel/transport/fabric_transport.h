// A Transport over libfabric: RDMA verbs on InfiniBand and RoCE through its
// `verbs` provider, and the same code over a software provider (`tcp`,
// `sockets`) on machines without an RDMA device, which is how CI tests it.
//
// Setup (connect_fabric_transport): every rank opens one reliable-datagram
// endpoint (FI_EP_RDM, tagged messages) on the chosen provider, publishes
// "<provider>|<hex endpoint address>" under "<prefix>/addr/<rank>", reads
// every other rank's entry (all ranks must have picked the same provider)
// and inserts the addresses into its address vector.
//
// Transfers: a message is cut into chunks (FabricTransportOptions::
// chunk_bytes); each chunk is one tagged send matched by one posted tagged
// receive. The tag is the sender's rank and a per-(sender, receiver) chunk
// sequence number:
//
//     63        48 47                                  0
//     +-----------+-------------------------------------+
//     |  sender   |  chunk number from sender to us     |
//     +-----------+-------------------------------------+
//
// so both sides must move the same byte counts in the same order, which the
// collectives do. Up to a window of chunks is in flight per direction; the
// completion queue is polled, and received chunks are reported to
// on_received in order as they complete. The buffers are used where they
// are (zero copy): each is registered once with the provider and the
// registration is cached by address range (fabric_mr_cache.h), so the
// gradient buckets and workspaces of a training run are registered on the
// first step and never again.
//
// Peers are also connected by an inner TCP transport, used for nothing but
// names and for noticing a peer that died: its socket closes, and a wait on
// that peer ends at once with "closed the connection". A stuck peer gives the
// TimeoutError of throw_transfer_timeout after the timeout without progress.
// Both name the peer like the TCP transport. After an error the endpoint is
// closed (no late completion can write into a caller's buffer) and the
// transport must not be used again.
//
// Without libfabric at build time, connect_fabric_transport throws a
// ConfigError that says so and how to get it (see cmake/libfabric.cmake).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "parallel/transport/transport.h"

namespace strata::parallel {

struct FabricTransportOptions {
  // libfabric provider: "verbs", "tcp", "sockets", ...; "" = the environment
  // variable STRATA_FABRIC_PROVIDER, else "verbs". Only verbs is RDMA; the
  // others are for machines without an RDMA device (tests, CI).
  std::string provider;
  // Software providers listen on the interface of this address (the one
  // that reaches the master); "" lets libfabric pick.
  std::string advertise_host;
  // This machine's name in messages; "" = gethostname().
  std::string hostname;
  // Size of one tagged message; larger transfers are cut into chunks of it.
  size_t chunk_bytes = 1 << 20;
  // Chunks in flight per direction.
  int window = 16;
};

// Whether this build has libfabric (STRATA_HAVE_LIBFABRIC).
bool fabric_transport_built();
// "1.17.0", or "" without libfabric.
std::string fabric_library_version();
// The provider a transport would use: options.provider, else
// STRATA_FABRIC_PROVIDER, else "verbs".
std::string fabric_provider_choice(const std::string& provider);
// Whether libfabric finds an RDMA device through its verbs provider (false
// without libfabric). `auto` transport selection asks this.
bool fabric_rdma_device_present();
// The providers libfabric finds for reliable tagged endpoints, e.g.
// "tcp;ofi_rxm (eth0, lo), sockets (eth0, lo)", for messages.
std::string fabric_providers_found();

// Wraps `inner` (a TCP transport that connects every pair: names, liveness);
// every rank of the world must call it with the same prefix. ConfigError
// when the provider is not found (naming what libfabric found) or the build
// has no libfabric; NetworkError/TimeoutError for setup failures.
std::unique_ptr<Transport> connect_fabric_transport(Store& store, std::unique_ptr<Transport> inner,
                                                    const std::string& prefix, std::chrono::milliseconds timeout,
                                                    const FabricTransportOptions& options = {});

// Memory registrations a fabric transport has made so far (0 for other
// transports): the count must not grow on repeated calls with the same buffers.
size_t fabric_registration_count(const Transport& t);
// "tcp;ofi_rxm", "verbs;ofi_rxm", ... of a fabric transport; "" otherwise.
std::string fabric_provider_name(const Transport& t);

}  // namespace strata::parallel
