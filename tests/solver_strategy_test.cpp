// Training strategies attach to the Solver through one interface
// (framework/solver/training_strategy.h): the order in which they take part does
// not depend on the order they attached in, a point one strategy owns cannot
// be taken by a second, and detaching removes that strategy only.
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/solver/solver.h"
#include "framework/solver/training_strategy.h"
#include "tests/solver_test_util.h"

namespace strata {
namespace {

using solver_test::parse_solver;
using solver_test::TempDir;
using solver_test::fill_inputs;

SolverConfig config(const TempDir& dir, const std::string& extra = "") {
  return parse_solver(solver_test::linear_solver("display: 0\n" + extra), dir.file("s.prototxt"));
}

// Records every point it is called at, as "<name>.<point>", into a shared log.
class Recording : public TrainingStrategy {
 public:
  Recording(std::string name, StrategyScope scope, std::vector<std::string>* log)
      : name_(std::move(name)), scope_(scope), log_(log) {}
  std::string name() const override { return name_; }
  StrategyScope scope() const override { return scope_; }
  void before_update(Net&) override { log_->push_back(name_ + ".before_update"); }
  float reduce_loss(float loss) override {
    log_->push_back(name_ + ".reduce_loss");
    return loss;
  }
  void before_test() override { log_->push_back(name_ + ".before_test"); }
  void reduce_outputs(NamedValues&) override { log_->push_back(name_ + ".reduce_outputs"); }
  void snapshot_state(SolverState&) override { log_->push_back(name_ + ".snapshot_state"); }

 private:
  std::string name_;
  StrategyScope scope_;
  std::vector<std::string>* log_;
};

std::vector<std::string> one_step_log(bool across_first) {
  TempDir dir;
  Solver solver(config(dir));
  fill_inputs(solver.net());
  std::vector<std::string> log;
  Recording across("across", StrategyScope::kAcrossReplicas, &log);
  Recording within("within", StrategyScope::kWithinReplica, &log);
  if (across_first) {
    solver.attach(across);
    solver.attach(within);
  } else {
    solver.attach(within);
    solver.attach(across);
  }
  solver.step();
  solver.detach(across);
  solver.detach(within);
  return log;
}

TEST(SolverStrategyTest, OrderFollowsScopeNotAttachOrder) {
  const std::vector<std::string> want = {"across.before_update", "within.before_update", "across.reduce_loss",
                                         "within.reduce_loss"};
  EXPECT_EQ(one_step_log(true), want);
  EXPECT_EQ(one_step_log(false), want);
}

TEST(SolverStrategyTest, DetachRemovesOnlyItsOwn) {
  TempDir dir;
  Solver solver(config(dir));
  fill_inputs(solver.net());
  std::vector<std::string> log;
  Recording a("a", StrategyScope::kAcrossReplicas, &log);
  Recording b("b", StrategyScope::kAcrossReplicas, &log);
  solver.attach(a);
  solver.attach(b);
  solver.attach(a);  // attaching twice is a no-op
  solver.detach(a);
  solver.step();
  EXPECT_EQ(log, (std::vector<std::string>{"b.before_update", "b.reduce_loss"}));
  ASSERT_EQ(solver.strategies().size(), 1u);
  EXPECT_EQ(solver.strategies()[0], &b);
  solver.detach(b);
}

// Owns the step: the Solver runs no forward/backward of its own.
class StepOwner final : public Recording {
 public:
  StepOwner(std::string name, std::vector<std::string>* log)
      : Recording(std::move(name), StrategyScope::kWithinReplica, log) {}
  bool owns_step() const override { return true; }
  float run_step() override {
    ++steps;
    return 7.5f;
  }
  int steps = 0;
};

TEST(SolverStrategyTest, AStrategyCanOwnTheStep) {
  TempDir dir;
  Solver solver(config(dir));
  fill_inputs(solver.net());
  std::vector<std::string> log;
  StepOwner owner("pipe", &log);
  solver.attach(owner);
  EXPECT_FLOAT_EQ(solver.step(), 7.5f);
  EXPECT_EQ(owner.steps, 1);
  // No forward/backward ran: the gradients stay as zero_param_diffs left them.
  for (const NetParam& p : solver.net().params()) {
    const float* g = p.blob->diff.data<float>();
    for (int64_t i = 0; i < p.blob->numel(); ++i) ASSERT_EQ(g[i], 0.0f) << p.name;
  }
  solver.detach(owner);
}

TEST(SolverStrategyTest, TwoOwnersOfOnePointAreRefused) {
  TempDir dir;
  Solver solver(config(dir));
  std::vector<std::string> log;
  StepOwner first("first pipeline", &log), second("second pipeline", &log);
  solver.attach(first);
  try {
    solver.attach(second);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'first pipeline'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'second pipeline'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the step"), std::string::npos) << msg;
  }
  EXPECT_EQ(solver.strategies().size(), 1u);
  solver.detach(first);
}

// Counts the gradients reported final during backward.
class GradCounter final : public Recording {
 public:
  explicit GradCounter(std::vector<std::string>* log) : Recording("grads", StrategyScope::kAcrossReplicas, log) {}
  bool wants_grad_ready() const override { return true; }
  void on_grad_ready(int) override { ++ready; }
  int ready = 0;
};

TEST(SolverStrategyTest, GradReadyReachesTheStrategiesThatWantIt) {
  TempDir dir;
  Solver solver(config(dir));
  fill_inputs(solver.net());
  std::vector<std::string> log;
  GradCounter counter(&log);
  Recording quiet("quiet", StrategyScope::kWithinReplica, &log);
  solver.attach(quiet);
  solver.attach(counter);
  solver.step();
  EXPECT_EQ(counter.ready, static_cast<int>(solver.net().params().size()));  // fc weight and bias
  solver.detach(counter);
  solver.step();  // the Net's callback is gone with the last strategy that wanted it
  EXPECT_EQ(counter.ready, static_cast<int>(solver.net().params().size()));
  solver.detach(quiet);
}

// Decides when every rank stops; the local flag alone does not stop the run.
class StopDecider final : public Recording {
 public:
  StopDecider(const Solver& solver, std::vector<std::string>* log)
      : Recording("decider", StrategyScope::kAcrossReplicas, log), solver_(solver) {}
  bool decides_stop() const override { return true; }
  bool stop_requested() const override { return solver_.iter() >= 4; }

 private:
  const Solver& solver_;
};

TEST(SolverStrategyTest, AStrategyThatDecidesStopOverridesTheLocalFlag) {
  TempDir dir;
  Solver solver(config(dir, "max_iter: 20 snapshot_after_train: false"));
  fill_inputs(solver.net());
  std::atomic<bool> local{true};  // raised from the start: without a decider the run would stop at once
  solver.set_stop_flag(&local);
  std::vector<std::string> log;
  StopDecider decider(solver, &log);
  solver.attach(decider);
  const SolveResult r = solver.solve();
  EXPECT_EQ(r.status, SolveStatus::kInterrupted);
  EXPECT_EQ(r.iter, 4);
  solver.detach(decider);
}

TEST(SolverStrategyTest, SnapshotPointsReachEveryStrategyAcrossFirst) {
  TempDir dir;
  Solver solver(config(dir, "max_iter: 2 snapshot: 2 snapshot_prefix: \"s\" snapshot_after_train: false"));
  fill_inputs(solver.net());
  std::vector<std::string> log;
  Recording within("within", StrategyScope::kWithinReplica, &log);
  Recording across("across", StrategyScope::kAcrossReplicas, &log);
  solver.attach(within);
  solver.attach(across);
  solver.solve();
  std::vector<std::string> snaps;
  for (const std::string& e : log) {
    if (e.find("snapshot_state") != std::string::npos) snaps.push_back(e);
  }
  EXPECT_EQ(snaps, (std::vector<std::string>{"across.snapshot_state", "within.snapshot_state"}));
  solver.detach(within);
  solver.detach(across);
}

}  // namespace
}  // namespace strata
