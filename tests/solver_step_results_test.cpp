// Results read one step later (framework/solver/step_ledger.h): the device
// (here the CPU, through the same code) decides each step, and the host reads
// the decision a step later. It must train the very weights the eager step
// trains, skip and scale as it does, and stop on a non-finite step without
// applying anything after it.
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/solver/solver.h"
#include "framework/solver/step_ledger.h"
#include "tests/solver_test_util.h"

namespace strata {
namespace {

using solver_test::all_weights;
using solver_test::fill_inputs;
using solver_test::linear_solver;
using solver_test::parse_solver;
using solver_test::TempDir;

std::vector<float> history(Optimizer& o) {
  std::vector<float> out;
  for (const auto& [name, t] : o.state_tensors()) {
    const float* d = t.data<float>();
    out.insert(out.end(), d, d + t.numel());
  }
  return out;
}

// Bit equality, saying where it fails.
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    ASSERT_EQ(x, y) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// `poison_at` > 0: the score of sample 0 turns inf after forward in that iteration (1-based).
struct TrainedRun {
  std::vector<float> w, h;
  double smoothed_loss = 0.0;
  int64_t iter = 0, steps = 0, skipped = 0, overflows = 0;
  double scale = 0.0;
  std::string notices;
};

TrainedRun train(const std::string& extra, const char* results, int poison_at = 0) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver(extra + " display: 0 snapshot_after_train: false step_results: " + results),
                             dir.file("s.prototxt")));
  EXPECT_EQ(solver.results_one_step_later(), std::string(results) == "ONE_STEP_LATER");
  fill_inputs(solver.net());
  Net& net = solver.net();
  const int fc = net.layer_index("fc");
  Net::LayerPassHooks hooks;
  hooks.after_forward = [&, fc](int layer) {
    if (layer == fc && solver.iter() + 1 == poison_at) {
      net.blob("score").data.data<float>()[0] = std::numeric_limits<float>::infinity();
    }
  };
  net.set_layer_pass_hooks(hooks);
  TrainedRun r;
  solver.set_notice_sink([&](const std::string& m) { r.notices += m + "\n"; });
  solver.solve();
  r.w = all_weights(net);
  r.h = history(solver.optimizer());
  r.smoothed_loss = solver.smoothed_loss();
  r.iter = solver.iter();
  r.steps = solver.optimizer().steps();
  r.skipped = solver.nonfinite_skipped();
  if (const LossScaler* s = solver.loss_scaler()) {
    r.scale = s->scale();
    r.overflows = s->skipped_steps();
  }
  return r;
}

void expect_same_run(const TrainedRun& later, const TrainedRun& each) {
  expect_same_bits(later.w, each.w, "weights");
  expect_same_bits(later.h, each.h, "optimizer history");
  EXPECT_EQ(later.iter, each.iter);
  EXPECT_EQ(later.steps, each.steps);
  EXPECT_EQ(later.skipped, each.skipped);
  EXPECT_EQ(later.scale, each.scale);
  EXPECT_EQ(later.overflows, each.overflows);
  // The loss is summed in double on the device rather than per pass in float: the last bits may differ.
  EXPECT_NEAR(later.smoothed_loss, each.smoothed_loss, 1e-6 * std::abs(each.smoothed_loss));
  EXPECT_GT(each.smoothed_loss, 0.0);
}

TEST(StepResultsOneStepLater, TrainsTheWeightsOfTheEagerStep) {
  for (const char* rule : {"type: \"SGD\" momentum: 0.9 weight_decay: 0.01",
                           "type: \"Adam\" momentum: 0.9 momentum2: 0.999",
                           "type: \"AdaDelta\" momentum: 0.95 delta: 1e-6"}) {
    for (const char* more : {"", "iter_size: 3", "clip_gradients: 0.05 average_loss: 4"}) {
      SCOPED_TRACE(std::string(rule) + " " + more);
      const std::string extra = std::string("max_iter: 9 ") + rule + " " + more;
      const TrainedRun each = train(extra, "EACH_STEP");
      const TrainedRun later = train(extra, "ONE_STEP_LATER");
      expect_same_run(later, each);
      EXPECT_EQ(each.steps, 9);
    }
  }
}

// FP16 on the CPU stores activations and their gradients in f16: a loss scale of
// 2^40 overflows them, and the scale halves step by step until it fits, then grows.
TEST(StepResultsOneStepLater, SkipsAndScalesAsTheEagerFp16Step) {
  const std::string extra =
      "max_iter: 40 precision: FP16 initial_loss_scale: 1099511627776 loss_scale_growth_interval: 3 "
      "type: \"Adam\"";
  const TrainedRun each = train(extra, "EACH_STEP");
  const TrainedRun later = train(extra, "ONE_STEP_LATER");
  expect_same_run(later, each);
  // Not vacuous: steps were skipped, and the scale grew again after the last overflow.
  EXPECT_GT(each.overflows, 5);
  EXPECT_LT(each.overflows, 40);
  EXPECT_EQ(each.steps, 40 - each.overflows);
  EXPECT_NE(later.notices.find("gradient overflow (inf/NaN) at loss scale 1.09951e+12, update skipped"),
            std::string::npos)
      << later.notices;
}

TEST(StepResultsOneStepLater, SkipsANonFiniteStepAsTheEagerStep) {
  const std::string extra = "max_iter: 7 nonfinite: SKIP type: \"SGD\" momentum: 0.9";
  const TrainedRun each = train(extra, "EACH_STEP", 4);
  const TrainedRun later = train(extra, "ONE_STEP_LATER", 4);
  expect_same_run(later, each);
  EXPECT_EQ(later.skipped, 1);
  EXPECT_EQ(later.steps, 6);
  EXPECT_NE(later.notices.find("iteration 4: the loss is"), std::string::npos) << later.notices;
  EXPECT_NE(later.notices.find("read one step later, when the next step had run (set"), std::string::npos)
      << later.notices;
}

// Under STOP the bad step is read while the next one has run already: that
// one must not have updated anything, and the error says so.
TEST(StepResultsOneStepLater, StopAppliesNothingAfterTheBadStep) {
  const std::string extra = "type: \"SGD\" momentum: 0.9";
  const TrainedRun three = train(extra + " max_iter: 3", "EACH_STEP");
  TempDir dir;
  Solver solver(parse_solver(linear_solver(extra + " max_iter: 9 display: 0 snapshot_after_train: false "
                                                   "step_results: ONE_STEP_LATER"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  Net& net = solver.net();
  Net::LayerPassHooks hooks;
  hooks.after_forward = [&](int layer) {
    if (layer == net.layer_index("fc") && solver.iter() + 1 == 4) {
      net.blob("score").data.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    }
  };
  net.set_layer_pass_hooks(hooks);
  const std::string msg = test::error_of<NumericError>([&] { solver.solve(); });
  EXPECT_CONTAINS(msg, "iteration 4: the loss is nan");
  EXPECT_CONTAINS(msg, "read one step later");
  EXPECT_CONTAINS(msg, "The update was not applied");
  EXPECT_EQ(solver.iter(), 5);  // the step after the bad one ran, and was halted
  EXPECT_EQ(solver.optimizer().steps(), 3);
  expect_same_bits(all_weights(net), three.w, "weights after the bad step");
  EXPECT_FALSE(file_exists(dir.file("s_iter_5.safetensors")));
}

// step() reads its own results before it returns: the loss of that step, and
// the eager step's error at the same iteration.
TEST(StepResultsOneStepLater, StepReturnsItsOwnLoss) {
  TempDir dir;
  Solver each(parse_solver(linear_solver("max_iter: 5 step_results: EACH_STEP"), dir.file("a.prototxt")));
  Solver later(parse_solver(linear_solver("max_iter: 5 step_results: ONE_STEP_LATER"), dir.file("b.prototxt")));
  fill_inputs(each.net());
  fill_inputs(later.net());
  for (int i = 0; i < 3; ++i) {
    const float a = each.step(), b = later.step();
    EXPECT_NEAR(b, a, 1e-6f * a) << i;
  }
  later.net().params()[0].blob->data.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  const std::string msg = test::error_of<NumericError>([&] { later.step(); });
  EXPECT_CONTAINS(msg, "iteration 4: the loss is nan");
  // Read at once: the diagnosis looks at this step's own blobs.
  EXPECT_CONTAINS(msg, "already holds non-finite weights");
}

// run_steps: the training loop without tests or progress (what benchmarks
// time), reading one step later; everything read when it returns.
TEST(StepResultsOneStepLater, RunStepsTrainsAsStepsDo) {
  TempDir dir;
  Solver each(parse_solver(linear_solver("max_iter: 50 type: \"Adam\" step_results: EACH_STEP"), dir.file("a.prototxt")));
  Solver later(parse_solver(linear_solver("max_iter: 50 type: \"Adam\" step_results: ONE_STEP_LATER"),
                            dir.file("b.prototxt")));
  fill_inputs(each.net());
  fill_inputs(later.net());
  for (int i = 0; i < 7; ++i) each.step();
  later.run_steps(7);
  EXPECT_EQ(later.iter(), 7);
  EXPECT_EQ(later.optimizer().steps(), 7);  // every record read: the optimizer's count is the device's
  expect_same_bits(all_weights(later.net()), all_weights(each.net()), "weights");
  EXPECT_NEAR(later.smoothed_loss(), each.smoothed_loss(), 1e-6 * std::abs(each.smoothed_loss()));
}

TEST(StepResultsOneStepLater, AutoReadsEveryStepOnTheCpu) {
  TempDir dir;
  Solver s(parse_solver(linear_solver("max_iter: 5"), dir.file("s.prototxt")));
  EXPECT_FALSE(s.results_one_step_later());
  EXPECT_EQ(s.step_results_summary(), "step results read every step");
  EXPECT_THROW(parse_solver(linear_solver("step_results: LATER"), dir.file("s.prototxt")), ConfigError);
}

TEST(StepLedger, ReadsEachRecordOnceOldestFirstAndFreesSlotsBeforeReuse) {
  StepRule rule;
  rule.iter_size = 2;
  StepCarry carry;
  carry.updates = 10;
  StepLedger ledger(Device::cpu(), rule, carry);
  std::vector<int64_t> read;
  std::vector<double> lrs;
  std::set<const double*> fixed_places, ring_places;
  for (int64_t it = 1; it <= 7; ++it) {
    StepSlots s;
    // Odd steps as a captured step graph runs them: the record at one fixed place.
    const bool fixed = it % 2 == 1;
    for (const SettledStep& r : ledger.begin(it, 0.5 * static_cast<double>(it), s, fixed)) {
      read.push_back(r.iteration);
      lrs.push_back(r.verdict.lr);
    }
    EXPECT_EQ(*s.lr, 0.5 * static_cast<double>(it));
    (fixed ? fixed_places : ring_places).insert(s.loss_sum);
    *s.loss_sum = 3.0 * static_cast<double>(it);
    *s.nonfinite = it == 5 ? 1 : 0;
    ledger.decide();
    EXPECT_EQ(*s.applied, it < 5 ? 1 : 0) << it;  // STOP: nothing applies from the bad step on
    ledger.finish();
    EXPECT_LE(ledger.unread(), static_cast<size_t>(StepLedger::kSlots));
  }
  // begin() read the oldest ones to free their slots, in order.
  EXPECT_EQ(read, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(lrs, (std::vector<double>{0.5, 1.0, 1.5}));  // each step's own, fixed record or not
  EXPECT_EQ(fixed_places.size(), 1u);
  EXPECT_EQ(ring_places.size(), 2u);  // slots 2, 0 and 2 again
  EXPECT_EQ(ring_places.count(*fixed_places.begin()), 0u);
  const std::vector<SettledStep> rest = ledger.settle(0);
  ASSERT_EQ(rest.size(), 4u);
  EXPECT_EQ(rest[0].iteration, 4);
  EXPECT_EQ(rest[0].verdict.halted, 0);
  EXPECT_EQ(rest[1].iteration, 5);
  EXPECT_EQ(step_loss(rest[1].verdict, rule), 7.5);  // a fixed record, copied out at finish
  EXPECT_EQ(rest[1].verdict.lr, 2.5);
  EXPECT_EQ(rest[1].verdict.halted, 1);
  EXPECT_EQ(rest[3].verdict.updates, 14);  // 10 + the four good steps
  EXPECT_EQ(ledger.unread(), 0u);
}

}  // namespace
}  // namespace strata
