#include "parallel/estimate/collectives_cost.h"

#include "framework/error.h"

namespace strata::estimate {

namespace {
void check_ranks(int ranks) { STRATA_CHECK(ranks >= 1, "a collective needs at least one rank, got ", ranks); }
}  // namespace

int tree_rounds(int ranks) {
  check_ranks(ranks);
  int rounds = 0;
  while ((1 << rounds) < ranks) ++rounds;
  return rounds;
}

double ring_allreduce_seconds(int ranks, double bytes, const Link& link) {
  check_ranks(ranks);
  const double n = ranks;
  return 2 * (n - 1) * link.latency + 2 * (n - 1) / n * bytes / link.bandwidth;
}

double tree_allreduce_seconds(int ranks, double bytes, const Link& link) {
  return 2 * tree_rounds(ranks) * transfer_seconds(link, bytes);
}

double broadcast_seconds(int ranks, double bytes, const Link& link) {
  return tree_rounds(ranks) * transfer_seconds(link, bytes);
}

double ring_allgather_seconds(int ranks, double bytes, const Link& link) {
  check_ranks(ranks);
  const double n = ranks;
  return (n - 1) * link.latency + (n - 1) / n * bytes / link.bandwidth;
}

double ring_reduce_scatter_seconds(int ranks, double bytes, const Link& link) {
  return ring_allgather_seconds(ranks, bytes, link);
}

double allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes, const Link& link) {
  return algorithm == AllreduceAlgorithm::kRing ? ring_allreduce_seconds(ranks, bytes, link)
                                                : tree_allreduce_seconds(ranks, bytes, link);
}

}  // namespace strata::estimate
