// A test knob for straggler experiments (`strata train --slowdown F`): this
// rank computes F times slower than it would, by sleeping F - 1 times the
// time of each step's forward/backward passes right after them. Attached
// before data parallelism or a parameter server (both go after it at each
// point of the step: the same scope, attach order), so the time it measures
// is the passes alone, without waiting for other ranks. It lets a benchmark
// on one machine show what a slow machine does to synchronous and
// asynchronous training.
#pragma once

#include <chrono>
#include <string>

#include "framework/solver/solver.h"
#include "framework/solver/training_strategy.h"

namespace strata::parallel {

class Slowdown final : public TrainingStrategy {
 public:
  // factor >= 1; 1 changes nothing. Attaches to the solver.
  Slowdown(Solver& solver, double factor);
  ~Slowdown() override;
  Slowdown(const Slowdown&) = delete;
  Slowdown& operator=(const Slowdown&) = delete;

  std::string name() const override { return "slowdown"; }
  StrategyScope scope() const override { return StrategyScope::kAcrossReplicas; }
  void before_step() override { step_start_ = Clock::now(); }
  void before_update(Net&) override;

 private:
  using Clock = std::chrono::steady_clock;
  Solver& solver_;
  double factor_;
  Clock::time_point step_start_;
};

// "--slowdown": a factor of at least 1; ConfigError otherwise.
double parse_slowdown(const std::string& text, const std::string& where);

}  // namespace strata::parallel
