// Time of one collective over n ranks joined by identical links, in the
// alpha-beta model (link.h), ignoring the time to add the numbers (the
// reduction's gamma term: a memory-bound add is cheap next to the wire).
//
// Formulas from Thakur, Rabenseifner and Gropp, "Optimization of Collective
// Communication Operations in MPICH" (IJHPCA 2005), with S the bytes of the
// whole buffer, B the bandwidth and alpha the latency:
//
//   ring allreduce      2(n-1)·alpha + 2(n-1)/n · S/B   (reduce-scatter + allgather;
//                       bandwidth-optimal, Patarasuk and Yuan 2009)
//   tree allreduce      2·ceil(log2 n)·(alpha + S/B)    (binomial reduce, then broadcast)
//   broadcast           ceil(log2 n)·(alpha + S/B)      (binomial tree)
//   ring allgather      (n-1)·alpha + (n-1)/n · S/B     (S: the gathered output)
//   ring reduce-scatter (n-1)·alpha + (n-1)/n · S/B     (S: the whole input)
//
// These are the algorithms parallel/collectives/ implements. One rank costs
// nothing; zero bytes cost the latency terms only.
#pragma once

#include "parallel/estimate/link.h"

namespace strata::estimate {

double ring_allreduce_seconds(int ranks, double bytes, const Link& link);
double tree_allreduce_seconds(int ranks, double bytes, const Link& link);
double broadcast_seconds(int ranks, double bytes, const Link& link);
double ring_allgather_seconds(int ranks, double bytes, const Link& link);
double ring_reduce_scatter_seconds(int ranks, double bytes, const Link& link);

enum class AllreduceAlgorithm { kRing, kTree };
double allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes, const Link& link);

// ceil(log2 n) for n >= 1: the rounds of a binomial tree.
int tree_rounds(int ranks);

}  // namespace strata::estimate
