// Dynamic loss scaling for FP16 training (the scheme of torch.cuda.amp's
// GradScaler): the loss gradient is multiplied by `scale` so small
// gradients survive fp16 rounding; after backward the gradients are checked
// and divided by the scale. When any is inf or NaN the step is skipped and
// the scale lowered (times `backoff`); after `growth_interval` good steps in
// a row it is raised (times `growth`). Pure logic: the Solver does the
// scaling and the check; the rule itself is advance_loss_scale
// (step_verdict.h), which the device runs too when results are read one
// step later.
#pragma once

#include <cstdint>

#include "framework/solver/step_verdict.h"

namespace strata {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, as torch.cuda.amp
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 1.0;  // never scaled below this (a net that overflows at 1 is broken)
};

enum class StepDecision { kApply, kSkip };

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});
  double scale() const { return scale_; }
  // After the overflow check of one step: kSkip (and a lower scale) when
  // gradients overflowed, else kApply (and maybe a higher scale).
  StepDecision update(bool found_overflow);
  int64_t good_steps() const { return good_steps_; }
  int64_t skipped_steps() const { return skipped_; }
  // The rule, for a device that decides (step_verdict.h).
  LossScaleRule rule() const;
  // Steps found skipped by the device (results read one step later).
  void count_skipped() { ++skipped_; }
  // For snapshots: the scale and the good-step counter.
  void set_state(double scale, int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace strata
