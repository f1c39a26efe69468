// `strata estimate --link measured`: the link measured between the ranks of
// a launched job instead of a preset, by ping-pong between rank 0 and the
// last rank (on another node when the job spans several):
//
//   rank 0 ── 8 B ──► rank N-1 ── 8 B ──► rank 0      x 50: latency = median round trip / 2
//   rank 0 ── 16 MiB ──► rank N-1 ── 16 MiB ──► rank 0 x 5: bandwidth = 16 MiB / (best round trip / 2 - latency)
//
// over the job's own communicator (the tcp backend with its transport: shared
// memory on one host, TCP or RDMA between hosts), so the numbers are what
// strata's collectives get, not a line rate.
#pragma once

#include "framework/communicator.h"
#include "parallel/estimate/link.h"

namespace strata::estimate {

// Collective over `comm` (every rank calls it; ranks other than 0 and the
// last take no part but return an empty link). With one rank: ConfigError.
Link probe_link(Communicator& comm);

}  // namespace strata::estimate
