#include "framework/solver/loss_scaler.h"

#include <algorithm>

#include "framework/error.h"

namespace strata {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options), scale_(options.initial_scale) {
  if (!(options.initial_scale > 0.0) || !(options.growth >= 1.0) || !(options.backoff > 0.0 && options.backoff < 1.0) ||
      options.growth_interval < 1) {
    fail<ConfigError>("loss scaling needs initial_scale > 0, growth >= 1, 0 < backoff < 1 and growth_interval >= 1; got ",
                      options.initial_scale, ", ", options.growth, ", ", options.backoff, ", ",
                      options.growth_interval);
  }
}

StepDecision LossScaler::update(bool found_overflow) {
  advance_loss_scale(rule(), found_overflow, scale_, good_steps_);
  if (!found_overflow) return StepDecision::kApply;
  ++skipped_;
  return StepDecision::kSkip;
}

LossScaleRule LossScaler::rule() const {
  LossScaleRule r;
  r.growth = options_.growth;
  r.backoff = options_.backoff;
  r.growth_interval = options_.growth_interval;
  r.min_scale = options_.min_scale;
  return r;
}

void LossScaler::set_state(double scale, int64_t good_steps) {
  if (scale > 0.0) scale_ = scale;
  good_steps_ = std::max<int64_t>(0, good_steps);
}

}  // namespace strata
