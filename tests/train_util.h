// Training a small solver to the end, for tests that compare two ways of
// running the same steps (memory layouts, recomputation): the losses of every
// step and the weights at the end.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"

namespace strata::test {

// Runs `config` to max_iter; appends each step's loss to `losses` and
// returns every parameter's values at the end.
inline std::vector<std::vector<float>> train_to_end(const SolverConfig& config, std::vector<float>* losses) {
  Solver solver(config);
  while (solver.iter() < config.max_iter) losses->push_back(solver.step());
  std::vector<std::vector<float>> w;
  for (const NetParam& p : solver.net().params()) w.push_back(values(p.blob->data));
  return w;
}

// Trains config_for("SEPARATE"), config_for("BY_LIFETIME") and
// config_for("BY_LIFETIME_CHECKED") and expects the same weights and losses
// from all three: the memory layout must not change a bit.
template <typename ConfigFor>
void expect_layouts_train_alike(const ConfigFor& config_for) {
  std::vector<float> loss_separate, loss_planned, loss_checked;
  const auto separate = train_to_end(config_for("SEPARATE"), &loss_separate);
  const auto planned = train_to_end(config_for("BY_LIFETIME"), &loss_planned);
  const auto checked = train_to_end(config_for("BY_LIFETIME_CHECKED"), &loss_checked);
  EXPECT_EQ(planned, separate);
  EXPECT_EQ(checked, separate);
  EXPECT_EQ(loss_planned, loss_separate);
  EXPECT_EQ(loss_checked, loss_separate);
  for (float l : loss_separate) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace strata::test
