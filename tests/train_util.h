// Training a small solver to the end, for tests that compare two ways of
// running the same steps (memory layouts, recomputation): the losses of every
// step and the weights at the end.
#pragma once

#include <vector>

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

}  // namespace strata::test
