// Allreduce over servers that each hold several devices: a fast link inside
// a server (NVLink, PCIe) and a slower network between servers. NCCL and
// Horovod's hierarchical allreduce take the gradients in three phases
// (Horovod: NCCLReduceScatter - MPIAllreduce - NCCLAllgather):
//
//   server 0: g0 g1 g2 g3     1. reduce-scatter inside each server (G devices):
//   server 1: g0 g1 g2 g3        device j holds the server's sum of shard j (S/G bytes)
//   ...                       2. G allreduces across the N servers at once, one per
//                                shard: device j of every server reduces shard j
//                             3. allgather inside each server
//
//   time = RS_intra(G, S) + AR_inter(N, S/G) + AG_intra(G, S)
//
// The G inter-server allreduces of phase 2 run at the same time and share
// the server's network adapters: each gets B · min(nics, G) / G. With one
// adapter the network term is 2(N−1)/N · S/B, the same as a flat ring over
// all N·G devices whose slowest hop is the network (that ring crosses each
// server boundary once per step); the hierarchy wins on latency, 2(N−1)
// network latencies instead of 2(NG−1). That is why this model, not the
// flat ring, is used when the servers are given.
//
// Workers that do not fill the last server are modelled as N = ceil(n/G)
// full servers (an approximation: the real collective is uneven).
#pragma once

#include "parallel/estimate/collectives_cost.h"
#include "parallel/estimate/link.h"

namespace strata::estimate {

struct NodeTopology {
  int devices_per_node = 0;  // G; 0 or 1: no servers given, every hop is `link`
  Link intra;                // the link between devices inside a server
  int nics_per_node = 1;     // network adapters a server's devices share
  bool given() const { return devices_per_node > 1; }
};

// The three-phase allreduce above; `inter` is the network between servers.
// Phase 2 uses `algorithm` (ring or binomial tree). With fewer workers than
// a server holds, a ring over `intra` alone.
double hierarchical_allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes, const Link& inter,
                                      const NodeTopology& nodes);

// hierarchical_allreduce_seconds when the servers are given, else the flat
// allreduce over `link` (collectives_cost.h).
double allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes, const Link& link,
                         const NodeTopology& nodes);

}  // namespace strata::estimate
