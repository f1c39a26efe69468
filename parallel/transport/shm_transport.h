// A Transport that moves bytes between ranks on the same host through
// shared memory and keeps an inner transport (TCP) for every other peer.
//
// Setup (connect_shm_transport): every rank publishes a host identity
// (hostname + kernel boot id) under "<prefix>/host/<rank>". For each ordered
// pair (src, dst) on the same host, dst creates a POSIX shared-memory ring
// (O_EXCL, name unique by pid and a random number, published in the store),
// src maps it and reports whether that worked, and dst unlinks the name as
// soon as src has answered, so nothing is left in /dev/shm even if a rank
// crashes later. A pair uses shared memory only when both directions mapped;
// otherwise it stays on the inner transport.
//
// Each ring is single-producer/single-consumer: std::atomic head (bytes
// written) and tail (bytes read) counters on separate cache lines, the data
// area after them. Waits spin briefly, then yield, then sleep in short
// poll() intervals on the peer's inner TCP socket, which the kernel closes
// when the peer dies: a crashed peer gives "closed the connection" at once,
// a stuck one a TimeoutError after the timeout without progress, both
// naming the peer like the TCP transport. A transport that is destroyed
// marks its rings closed, so peers stop waiting on it at once too.
//
// send_recv with one direction over shared memory and the other over the
// inner transport runs the send direction on a helper thread; on_received is
// always called by the receiving thread, in order.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "parallel/transport/transport.h"

namespace strata::parallel {

struct ShmTransportOptions {
  // Bytes of ring buffer per ordered pair of ranks (rounded up to a power of two).
  size_t ring_bytes = 4 << 20;
  // This machine's name in messages; "" = gethostname().
  std::string hostname;
  // Overrides the host identity (tests use it to pretend ranks are on
  // different hosts); "" = hostname + kernel boot id.
  std::string host_id;
};

// Wraps `inner` (which must already connect every pair); exchanges setup
// through the store under `prefix`. Every rank of the world must call it.
std::unique_ptr<Transport> connect_shm_transport(Store& store, std::unique_ptr<Transport> inner,
                                                 const std::string& prefix, std::chrono::milliseconds timeout,
                                                 const ShmTransportOptions& options = {});

// False when the environment variable STRATA_SHM is "0" (shared memory off).
bool shm_enabled_by_env();

// How many peers `t` reaches through shared memory (0 for other transports).
int shm_peer_count(const Transport& t);

// The transport a shared-memory transport wraps; nullptr for other transports.
const Transport* shm_inner_transport(const Transport& t);

}  // namespace strata::parallel
