// A parameter server: each worker pushes its gradients (G bytes) to the
// server and pulls the new weights (G bytes) back every step, so one
// exchange costs a worker t = 2·(alpha + G/B) on its own link. The server's
// link is what limits it (Li et al., "Scaling Distributed Machine Learning
// with the Parameter Server", OSDI 2014, describe the design; the bounds
// below are the bandwidth argument, C = forward + backward of one worker):
//
//   central, worst: all n workers push at once and share the server's link
//                   step = C + 2·(alpha + n·G/B)
//   central, best:  the exchanges are staggered, one worker's communication
//                   interleaved with the others' compute; the server's link
//                   serves n exchanges per step and each worker needs C + t:
//                   step = max(C + t, n·t)
//                   (this needs the workers out of phase: asynchronous or
//                   stale updates; synchronous training cannot reach it)
//   sharded, K:     K servers on their own links, each holding G/K; all
//                   workers push at once, shard links carry n·G/K and each
//                   worker's link G:
//                   step = C + 2·(alpha + max(n/K, 1)·G/B)
//
// Servers are separate machines, not counted among the workers; the update
// on the server and the overlap of pushes with backward are not modelled.
#pragma once

#include "parallel/estimate/link.h"
#include "parallel/estimate/step_estimate.h"

namespace strata::estimate {

enum class ServerArrangement { kWorst, kBest };

StepEstimate central_server_step(const StepProfile& profile, int workers, const Link& link,
                                 ServerArrangement arrangement);
StepEstimate sharded_server_step(const StepProfile& profile, int workers, int shards, const Link& link);

}  // namespace strata::estimate
