// Learning-rate schedules, with Caffe's formulas (iter is the 0-based index
// of the iteration about to be applied):
//   fixed      base_lr
//   step       base_lr * gamma ^ floor(iter / stepsize)
//   multistep  base_lr * gamma ^ (number of stepvalues <= iter)
//   exp        base_lr * gamma ^ iter
//   inv        base_lr * (1 + gamma * iter) ^ (-power)
//   poly       base_lr * (1 - iter / max_iter) ^ power
//   sigmoid    base_lr / (1 + exp(-gamma * (iter - stepsize)))
//   cosine     min_lr + (base_lr - min_lr) * (1 + cos(pi * iter / max_iter)) / 2
// A linear warm-up multiplies the result for iter < warmup_iter by
//   warmup_start_factor + (1 - warmup_start_factor) * iter / warmup_iter
// (PyTorch's LinearLR chained with the main schedule).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class LrPolicy { kFixed, kStep, kMultiStep, kExp, kInv, kPoly, kSigmoid, kCosine };

// Caffe spelling: "fixed", "step", "multistep", ...
const std::vector<std::string>& lr_policy_names();
const char* lr_policy_name(LrPolicy p);
// Error on an unknown name (callers validate with ConfigNode::get_enum first).
LrPolicy parse_lr_policy(const std::string& name);

struct LrSchedule {
  LrPolicy policy = LrPolicy::kFixed;
  double base_lr = 0.01;
  double gamma = 0.1;
  double power = 1.0;
  int64_t stepsize = 0;
  std::vector<int64_t> stepvalues;  // ascending
  int64_t max_iter = 0;
  double min_lr = 0.0;
  int64_t warmup_iter = 0;
  double warmup_start_factor = 0.0;
};

// The learning rate for iteration `iter` (>= 0).
double learning_rate(const LrSchedule& schedule, int64_t iter);

}  // namespace strata
