// A run that goes inf/NaN stops (or skips the step, when asked) instead of
// training on and writing broken snapshots; snapshot_keep keeps the newest.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/solver/solver.h"
#include "tests/solver_test_util.h"
#include "tests/strategy_test_util.h"

namespace strata {
namespace {

using solver_test::fill_inputs;
using solver_test::linear_solver;
using solver_test::parse_solver;
using solver_test::TempDir;

// (A whole diverging run, base_lr 1e30 on the digits, is tests/cli/run_files_test.sh.)
TEST(SolverNonFinite, InfGradientStopsNamingIterationAndParameter) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 50 display: 0 snapshot_after_train: false"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  std::vector<float> at_three;
  test::BeforeUpdate poison(solver, [&](Net& net) {
    if (solver.iter() != 3) return;
    for (const NetParam& p : net.params()) {
      const float* d = p.blob->data.data<float>();
      at_three.insert(at_three.end(), d, d + p.blob->numel());
    }
    net.params()[1].blob->diff.data<float>()[0] = std::numeric_limits<float>::infinity();
  });
  try {
    solver.solve();
    FAIL() << "expected a NumericError";
  } catch (const NumericError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("iteration 4: the loss is "), std::string::npos) << msg;
    EXPECT_NE(msg.find("some gradients are not finite"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gradient in backward is that of parameter '" + solver.net().params()[1].name + "'"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("nonfinite: SKIP"), std::string::npos) << msg;
  }
  // The failing step's update was not applied, and no snapshot was written.
  EXPECT_EQ(solver.iter(), 3);
  size_t k = 0;
  for (const NetParam& p : solver.net().params()) {
    const float* d = p.blob->data.data<float>();
    for (int64_t i = 0; i < p.blob->numel(); ++i, ++k) ASSERT_EQ(d[i], at_three[k]) << p.name;
  }
  EXPECT_FALSE(file_exists(dir.file("s_iter_3.safetensors")));
  EXPECT_FALSE(file_exists(dir.file("s_iter_4.safetensors")));
}

TEST(SolverNonFinite, NaNWeightStopsAtTheFirstStep) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 5 display: 0 snapshot_after_train: false"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  solver.net().params()[0].blob->data.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  try {
    solver.step();
    FAIL() << "expected a NumericError";
  } catch (const NumericError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("iteration 1:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter '" + solver.net().params()[0].name + "' already holds non-finite weights"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(solver.iter(), 0);
}

TEST(SolverNonFinite, SkipLeavesTheWeightsAndCounts) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 3 display: 0 nonfinite: SKIP snapshot_after_train: false"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  // A NaN input: the loss and every gradient are NaN, the weights must not change.
  solver.net().blob("data").data.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> before;
  for (const NetParam& p : solver.net().params()) {
    const float* d = p.blob->data.data<float>();
    before.insert(before.end(), d, d + p.blob->numel());
  }
  std::string notices;
  solver.set_notice_sink([&](const std::string& m) { notices += m + "\n"; });
  solver.solve();
  EXPECT_EQ(solver.iter(), 3);
  EXPECT_EQ(solver.nonfinite_skipped(), 3);
  EXPECT_NE(notices.find("update skipped"), std::string::npos) << notices;
  // The NaN came in with the data: the Input layer's output is the first that is not finite.
  EXPECT_NE(notices.find("the first non-finite output is that of layer 'input' (Input)"), std::string::npos)
      << notices;
  size_t k = 0;
  for (const NetParam& p : solver.net().params()) {
    const float* d = p.blob->data.data<float>();
    for (int64_t i = 0; i < p.blob->numel(); ++i, ++k) ASSERT_EQ(d[i], before[k]) << p.name;
  }
}

TEST(SolverNonFinite, KeyIsChecked) {
  TempDir dir;
  EXPECT_THROW(parse_solver(linear_solver("nonfinite: IGNORE"), dir.file("s.prototxt")), ConfigError);
  EXPECT_THROW(parse_solver(linear_solver("snapshot_keep: -1"), dir.file("s.prototxt")), ConfigError);
}

TEST(SolverRetention, SnapshotKeepLeavesTheNewest) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 5 display: 0 snapshot: 1 snapshot_keep: 2"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  solver.solve();
  for (int it = 1; it <= 5; ++it) {
    const bool kept = it >= 4;
    EXPECT_EQ(file_exists(dir.file("s_iter_" + std::to_string(it) + ".safetensors")), kept) << it;
    EXPECT_EQ(file_exists(dir.file("s_iter_" + std::to_string(it) + ".solverstate.safetensors")), kept) << it;
  }
}

}  // namespace
}  // namespace strata
