#include "framework/solver/lr_policy.h"

#include <algorithm>
#include <cmath>

#include "framework/error.h"

namespace strata {

const std::vector<std::string>& lr_policy_names() {
  static const std::vector<std::string> names = {"fixed", "step", "multistep", "exp",
                                                 "inv",   "poly", "sigmoid",   "cosine"};
  return names;
}

const char* lr_policy_name(LrPolicy p) {
  return lr_policy_names().at(static_cast<size_t>(p)).c_str();
}

LrPolicy parse_lr_policy(const std::string& name) {
  const auto& names = lr_policy_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<LrPolicy>(i);
  }
  fail<ConfigError>("unknown lr_policy '", name,
                    "' (known: fixed, step, multistep, exp, inv, poly, sigmoid, cosine)");
}

namespace {

double policy_rate(const LrSchedule& s, int64_t iter) {
  const double it = static_cast<double>(iter);
  switch (s.policy) {
    case LrPolicy::kFixed:
      return s.base_lr;
    case LrPolicy::kStep: {
      STRATA_CHECK(s.stepsize > 0, "step policy needs stepsize > 0");
      return s.base_lr * std::pow(s.gamma, static_cast<double>(iter / s.stepsize));
    }
    case LrPolicy::kMultiStep: {
      int64_t passed = 0;
      for (int64_t v : s.stepvalues) {
        if (iter >= v) ++passed;
      }
      return s.base_lr * std::pow(s.gamma, static_cast<double>(passed));
    }
    case LrPolicy::kExp:
      return s.base_lr * std::pow(s.gamma, it);
    case LrPolicy::kInv:
      return s.base_lr * std::pow(1.0 + s.gamma * it, -s.power);
    case LrPolicy::kPoly: {
      if (s.max_iter <= 0) return s.base_lr;
      // Past max_iter (a resumed run with a larger budget keeps the old
      // schedule) the rate stays at its floor rather than going negative.
      const double frac = std::min(1.0, it / static_cast<double>(s.max_iter));
      return s.base_lr * std::pow(1.0 - frac, s.power);
    }
    case LrPolicy::kSigmoid:
      return s.base_lr * (1.0 / (1.0 + std::exp(-s.gamma * (it - static_cast<double>(s.stepsize)))));
    case LrPolicy::kCosine: {
      if (s.max_iter <= 0) return s.base_lr;
      const double frac = std::min(1.0, it / static_cast<double>(s.max_iter));
      return s.min_lr + (s.base_lr - s.min_lr) * (1.0 + std::cos(M_PI * frac)) / 2.0;
    }
  }
  return s.base_lr;
}

}  // namespace

double learning_rate(const LrSchedule& s, int64_t iter) {
  double lr = policy_rate(s, iter);
  if (iter < s.warmup_iter) {
    const double f = static_cast<double>(iter) / static_cast<double>(s.warmup_iter);
    lr *= s.warmup_start_factor + (1.0 - s.warmup_start_factor) * f;
  }
  return lr;
}

}  // namespace strata
