#include "parallel/estimate/hierarchical_cost.h"

#include <algorithm>

#include "framework/error.h"

namespace strata::estimate {

double hierarchical_allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes, const Link& inter,
                                      const NodeTopology& nodes) {
  STRATA_CHECK(ranks >= 1, "a collective needs at least one rank, got ", ranks);
  STRATA_CHECK(nodes.devices_per_node >= 1, "devices per server must be >= 1, got ", nodes.devices_per_node);
  STRATA_CHECK(nodes.nics_per_node >= 1, "network adapters per server must be >= 1, got ", nodes.nics_per_node);
  const int g = std::min(ranks, nodes.devices_per_node);
  const int servers = (ranks + nodes.devices_per_node - 1) / nodes.devices_per_node;
  if (servers == 1) return allreduce_seconds(algorithm, g, bytes, nodes.intra);
  Link shared = inter;  // one shard's share of the server's adapters
  shared.bandwidth = inter.bandwidth * std::min(nodes.nics_per_node, g) / g;
  return ring_reduce_scatter_seconds(g, bytes, nodes.intra) + allreduce_seconds(algorithm, servers, bytes / g, shared) +
         ring_allgather_seconds(g, bytes, nodes.intra);
}

double allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes, const Link& link,
                         const NodeTopology& nodes) {
  return nodes.given() ? hierarchical_allreduce_seconds(algorithm, ranks, bytes, link, nodes)
                       : allreduce_seconds(algorithm, ranks, bytes, link);
}

}  // namespace strata::estimate
