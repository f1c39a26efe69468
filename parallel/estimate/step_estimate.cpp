#include "parallel/estimate/step_estimate.h"

namespace strata::estimate {

double speedup(const StepEstimate& e, const StepProfile& profile) {
  const double alone = profile.compute_seconds() > 0 ? profile.batch / profile.compute_seconds() : 0.0;
  return e.feasible && alone > 0 ? e.throughput() / alone : 0.0;
}

double efficiency(const StepEstimate& e, const StepProfile& profile) {
  return e.workers > 0 ? speedup(e, profile) / e.workers : 0.0;
}

StepEstimate infeasible(int workers, const std::string& why) {
  StepEstimate e;
  e.feasible = false;
  e.workers = workers;
  e.note = why;
  return e;
}

}  // namespace strata::estimate
