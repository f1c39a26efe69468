// Per-layer forward and backward times of a net on this machine, shared by
// `strata time` (which prints them) and `strata estimate` (which predicts
// parallel runs from them).
#pragma once

#include <string>
#include <vector>

#include "framework/net.h"
#include "parallel/estimate/step_profile.h"

namespace strata::cli {

struct LayerTimes {
  std::vector<double> forward_ms;   // per layer, averaged over the iterations
  std::vector<double> backward_ms;  // 0 for a layer that needs no backward
  double step_ms = 0.0;             // average whole forward-backward
  std::string note;                 // how they were measured ("GPU times from CUDA events on cuda:0; ...")
};

// One warm-up forward-backward, then `iterations` timed ones: wall time on
// the CPU, CUDA events around each layer on the compute stream on a GPU.
LayerTimes measure_layer_times(Net& net, int iterations);

// The times of a `strata train --timeline` trace (rank 0's main thread):
// each layer's forward and backward events inside the steps (a test's
// forwards are outside them), averaged over the steps. IoError naming the
// file when it is not a trace or holds no step.
LayerTimes layer_times_from_trace(const std::string& path, const Net& net);

// What rank 0 of a data-parallel `strata train --timeline` trace spent on
// its gradients' allreduce, averaged over its steps: the wire's busy time
// (the union of the buckets' spans, launch to completion) and the part the
// step waited for (its "wait allreduce", or the whole allreduce after
// backward when buckets do not overlap). Zero for a one-rank trace.
struct TraceCommunication {
  int ranks = 0;  // processes with steps in the trace
  int steps = 0;  // rank 0's steps
  double step_ms = 0.0;
  double busy_ms = 0.0;
  double exposed_ms = 0.0;
  double buckets_per_step = 0.0;
  bool overlapped = true;  // false: one allreduce after backward (overlap off)
};
TraceCommunication communication_from_trace(const std::string& path);

// The estimate's view of the net: the times, the gradient bytes each layer's
// backward makes final (as the data-parallel buckets count them), the bytes
// of its parameters, of its tops and bottoms and of the tops it creates (not
// in place), its `split` key, and the batch (the first dimension of the
// first layer's first top).
estimate::StepProfile step_profile(const Net& net, const LayerTimes& times);

}  // namespace strata::cli
