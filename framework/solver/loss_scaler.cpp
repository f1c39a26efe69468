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
  if (found_overflow) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff);
    good_steps_ = 0;
    ++skipped_;
    return StepDecision::kSkip;
  }
  if (++good_steps_ >= options_.growth_interval) {
    // fp32 cannot hold much beyond 2^127; stop well before.
    scale_ = std::min(scale_ * options_.growth, 1e30);
    good_steps_ = 0;
  }
  return StepDecision::kApply;
}

void LossScaler::set_state(double scale, int64_t good_steps) {
  if (scale > 0.0) scale_ = scale;
  good_steps_ = std::max<int64_t>(0, good_steps);
}

}  // namespace strata
