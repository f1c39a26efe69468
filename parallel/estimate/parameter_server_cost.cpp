#include "parallel/estimate/parameter_server_cost.h"

#include <algorithm>

#include "framework/error.h"

namespace strata::estimate {

namespace {
StepEstimate base(const StepProfile& profile, int workers) {
  STRATA_CHECK(workers >= 1, "workers must be >= 1, got ", workers);
  StepEstimate e;
  e.workers = workers;
  e.samples = static_cast<double>(workers) * profile.batch;
  return e;
}
}  // namespace

StepEstimate central_server_step(const StepProfile& profile, int workers, const Link& link,
                                 ServerArrangement arrangement) {
  StepEstimate e = base(profile, workers);
  const double compute = profile.compute_seconds();
  const double g = profile.grad_bytes();
  const double exchange = 2 * transfer_seconds(link, g);  // one worker's push + pull
  if (arrangement == ServerArrangement::kWorst) {
    e.communication = 2 * (link.latency + workers * g / link.bandwidth);
    e.step = compute + e.communication;
  } else {
    e.communication = exchange;
    e.step = std::max(compute + exchange, workers * exchange);
  }
  e.exposed = e.step - compute;
  return e;
}

StepEstimate sharded_server_step(const StepProfile& profile, int workers, int shards, const Link& link) {
  STRATA_CHECK(shards >= 1, "shards must be >= 1, got ", shards);
  StepEstimate e = base(profile, workers);
  const double load = std::max(static_cast<double>(workers) / shards, 1.0);  // busiest link, in units of G
  e.communication = 2 * (link.latency + load * profile.grad_bytes() / link.bandwidth);
  e.step = profile.compute_seconds() + e.communication;
  e.exposed = e.communication;
  return e;
}

}  // namespace strata::estimate
