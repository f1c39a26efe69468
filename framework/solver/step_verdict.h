// A step's verdict: what the end of a training step decides from its loss
// and its gradients (apply the update or skip it, the next FP16 loss scale,
// stop for good), written once and run by both the host and the device.
//
// Eagerly the host reads the loss and the finite flag after every step and
// decides; with the results read one step later (StepLedger) the device
// decides, in a one-thread kernel that calls decide_step below, and the host
// reads the verdict while the GPU already runs the next step. Both paths
// evaluate these very expressions, so the CPU tests check what the GPU runs.
// Plain data only: the record is copied byte for byte between the two.
#pragma once

#include <cmath>
#include <cstdint>

#ifndef STRATA_HOST_DEVICE
#ifdef __CUDACC__
#define STRATA_HOST_DEVICE __host__ __device__ inline
#else
#define STRATA_HOST_DEVICE inline
#endif
#endif

namespace strata {

// Dynamic loss scaling's rule (torch.cuda.amp's GradScaler; LossScaler).
struct LossScaleRule {
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 1.0;  // never scaled below this
};

// After one step's overflow check: lower the scale on overflow, raise it
// after growth_interval good steps in a row.
STRATA_HOST_DEVICE void advance_loss_scale(const LossScaleRule& r, bool overflow, double& scale, int64_t& good_steps) {
  if (overflow) {
    scale = scale * r.backoff < r.min_scale ? r.min_scale : scale * r.backoff;
    good_steps = 0;
    return;
  }
  if (++good_steps >= r.growth_interval) {
    // fp32 cannot hold much beyond 2^127; stop well before.
    scale = scale * r.growth > 1e30 ? 1e30 : scale * r.growth;
    good_steps = 0;
  }
}

// How a run decides.
struct StepRule {
  bool scaling = false;            // FP16: skip overflowed steps and adapt the scale
  LossScaleRule scale_rule;
  bool stop_on_nonfinite = true;   // `nonfinite: STOP`: after the first bad step no update applies
  int32_t iter_size = 1;
};

// One step's record. The step's work fills loss_sum (forward), nonfinite and
// sum_squares (the gradient check); decide_step fills the rest from `carry`,
// the state every step hands to the next.
struct StepVerdict {
  double loss_sum = 0.0;     // the weighted loss tops, summed over the step's iter_size passes
  double sum_squares = 0.0;  // of the gradients after unscaling (clip_gradients' norm squared)
  double scale = 1.0;        // the loss scale this step's backward used
  double next_scale = 1.0;   // the scale the next step uses
  double stop = 0.0;         // ranks that asked to stop at this step (data parallel agrees on it)
  double lr = 0.0;           // the learning rate the update uses (StepLedger::begin writes it)
  int64_t good_steps = 0;    // overflow-free steps in a row, after this one
  int64_t updates = 0;       // optimizer updates applied, this one included (Adam's t)
  int32_t nonfinite = 0;     // some gradient was inf or NaN
  int32_t applied = 0;       // the optimizer update of this step ran
  int32_t halted = 0;        // a non-finite step under STOP: no later update applies
  int32_t unused = 0;
};

// What carries from step to step: the scale, its counter, the update count and the halt.
struct StepCarry {
  double scale = 1.0;
  int64_t good_steps = 0;
  int64_t updates = 0;
  int32_t halted = 0;
  int32_t unused = 0;
};

STRATA_HOST_DEVICE double step_loss(const StepVerdict& v, const StepRule& r) {
  return v.loss_sum / static_cast<double>(r.iter_size);
}

// The end of a step: whether its update applies, and what the next step starts from.
STRATA_HOST_DEVICE void decide_step(const StepRule& r, StepCarry& carry, StepVerdict& v) {
  v.scale = carry.scale;
  if (r.scaling) {
    // FP16: only the gradients decide (an inf loss with finite gradients still updates, as eagerly).
    const bool overflow = v.nonfinite != 0;
    advance_loss_scale(r.scale_rule, overflow, carry.scale, carry.good_steps);
    v.applied = overflow ? 0 : 1;
  } else {
#ifdef __CUDA_ARCH__
    const bool finite = v.nonfinite == 0 && isfinite(step_loss(v, r));
#else
    const bool finite = v.nonfinite == 0 && std::isfinite(step_loss(v, r));
#endif
    v.applied = finite && carry.halted == 0 ? 1 : 0;
    if (!finite && r.stop_on_nonfinite) carry.halted = 1;
  }
  if (v.applied) ++carry.updates;
  v.next_scale = carry.scale;
  v.good_steps = carry.good_steps;
  v.updates = carry.updates;
  v.halted = carry.halted;
}

}  // namespace strata
