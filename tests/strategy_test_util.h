// A TrainingStrategy made of callbacks, for tests that take part in the
// Solver's loop at one point (framework/solver/training_strategy.h).
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "framework/solver/solver.h"
#include "framework/solver/training_strategy.h"

namespace strata::test {

// Runs `fn` at before_update; attached for its lifetime.
class BeforeUpdate final : public TrainingStrategy {
 public:
  BeforeUpdate(Solver& solver, std::function<void(Net&)> fn) : solver_(solver), fn_(std::move(fn)) {
    solver_.attach(*this);
  }
  ~BeforeUpdate() override { solver_.detach(*this); }
  std::string name() const override { return "test before_update"; }
  StrategyScope scope() const override { return StrategyScope::kWithinReplica; }
  void before_update(Net& net) override { fn_(net); }

 private:
  Solver& solver_;
  std::function<void(Net&)> fn_;
};

}  // namespace strata::test
