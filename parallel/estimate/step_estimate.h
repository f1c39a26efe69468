// The predicted cost of one training step under one strategy, and the
// figures the table shows, all relative to one worker training alone (its
// step is StepProfile::compute_seconds(), no communication).
#pragma once

#include <string>

#include "parallel/estimate/step_profile.h"

namespace strata::estimate {

struct StepEstimate {
  bool feasible = true;  // false: the layout cannot run (note says why)
  std::string note;
  int workers = 1;
  double step = 0.0;           // seconds per step
  double samples = 0.0;        // samples per step, all workers together
  double communication = 0.0;  // seconds of communication per step (busy wire time)
  double exposed = 0.0;        // seconds of the step spent waiting (not overlapped with compute)

  double throughput() const { return step > 0 ? samples / step : 0.0; }  // samples per second
};

// Throughput over that of one worker alone (batch / compute seconds).
double speedup(const StepEstimate& e, const StepProfile& profile);
// speedup / workers.
double efficiency(const StepEstimate& e, const StepProfile& profile);

StepEstimate infeasible(int workers, const std::string& why);

}  // namespace strata::estimate
