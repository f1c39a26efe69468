// The Solver loop (iter_size, the before_update hook, tests, display,
// snapshots, the stop flag) with its console and JSON-lines reporting.
// Configuration, learning-rate policies, update rules and clipping are in
// solver_config_test.cpp; numbers against PyTorch in solver_golden_test.cpp;
// snapshots and resume in checkpoint_test.cpp.
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/io/json.h"
#include "framework/solver/lr_policy.h"
#include "framework/solver/optimizer.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "framework/solver/training_log.h"
#include "tests/solver_test_util.h"
#include "tests/strategy_test_util.h"

namespace strata {
namespace {

using solver_test::parse_solver;
using solver_test::TempDir;
using solver_test::write_text;
using solver_test::kLinearNet;
using solver_test::linear_solver;
using solver_test::fill_inputs;
using solver_test::all_weights;

// ---------------------------------------------------------------------------
// The Solver loop


TEST(SolverTest, StepLowersTheLossAndCountsIterations) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 20 momentum: 0.9"), dir.file("s.prototxt")));
  fill_inputs(solver.net());
  EXPECT_EQ(solver.test_net(), nullptr);
  const float first = solver.step();
  float last = first;
  for (int i = 0; i < 19; ++i) last = solver.step();
  EXPECT_EQ(solver.iter(), 20);
  EXPECT_LT(last, first * 0.5f);
  EXPECT_GT(first, 0.0f);
}

TEST(SolverTest, IterSizeAveragesGradientsAndLoss) {
  // With the same batch in every pass, iter_size 3 must equal iter_size 1.
  TempDir dir;
  Solver one(parse_solver(linear_solver(""), dir.file("a.prototxt")));
  Solver three(parse_solver(linear_solver("iter_size: 3"), dir.file("b.prototxt")));
  fill_inputs(one.net());
  fill_inputs(three.net());
  ASSERT_EQ(all_weights(one.net()), all_weights(three.net()));  // same seed, same init
  for (int i = 0; i < 3; ++i) {
    const float l1 = one.step(), l3 = three.step();
    EXPECT_NEAR(l1, l3, 1e-6f * std::fabs(l1));
  }
  const auto a = all_weights(one.net()), b = all_weights(three.net());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::fabs(a[i]))) << i;
}

TEST(SolverTest, BeforeUpdateHookSeesGradients) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver(""), dir.file("s.prototxt")));
  fill_inputs(solver.net());
  int calls = 0;
  test::BeforeUpdate before_update_hook(solver, [&](Net& net) {
    ++calls;
    double sq = 0;
    for (NetParam& p : net.params()) {
      for (int64_t i = 0; i < p.blob->numel(); ++i) sq += p.blob->diff.data<float>()[i] * p.blob->diff.data<float>()[i];
      p.blob->diff.zero();  // what the update then sees
    }
    EXPECT_GT(sq, 0.0);
  });
  const auto before = all_weights(solver.net());
  solver.step();
  solver.step();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(all_weights(solver.net()), before);  // no gradient, no decay, no momentum: no change
}

TEST(SolverTest, ClippingLimitsTheFirstStep) {
  TempDir dir;
  Solver free_run(parse_solver(linear_solver(""), dir.file("a.prototxt")));
  Solver clipped(parse_solver(linear_solver("clip_gradients: 0.01"), dir.file("b.prototxt")));
  fill_inputs(free_run.net());
  fill_inputs(clipped.net());
  const auto w0 = all_weights(clipped.net());
  free_run.step();
  clipped.step();
  double moved_sq = 0, free_sq = 0;
  const auto w1 = all_weights(clipped.net()), wf = all_weights(free_run.net());
  for (size_t i = 0; i < w0.size(); ++i) {
    moved_sq += (w1[i] - w0[i]) * (w1[i] - w0[i]);
    free_sq += (wf[i] - w0[i]) * (wf[i] - w0[i]);
  }
  EXPECT_NEAR(std::sqrt(moved_sq), 0.1 * 0.01, 1e-6);  // lr * clip
  EXPECT_GT(std::sqrt(free_sq), 0.1 * 0.01 * 2);
}

TEST(SolverTest, FrozenLayerStaysPut) {
  TempDir dir;
  std::string net = kLinearNet;
  const std::string from = "bottom: \"data\" top: \"score\"";
  net.replace(net.find(from), from.size(), from + " param { lr_mult: 0 } param { lr_mult: 1 }");
  Solver solver(parse_solver(std::string("net_param {") + net + "} base_lr: 0.1 weight_decay: 0.1",
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  const NetParam& w = solver.net().params()[solver.net().param_index("fc.weight")];
  const NetParam& b = solver.net().params()[solver.net().param_index("fc.bias")];
  const std::vector<float> w0(w.blob->data.data<float>(), w.blob->data.data<float>() + w.blob->numel());
  const float b0 = b.blob->data.data<float>()[0];
  solver.step();
  EXPECT_EQ(std::vector<float>(w.blob->data.data<float>(), w.blob->data.data<float>() + w.blob->numel()), w0);
  EXPECT_NE(b.blob->data.data<float>()[0], b0);
  EXPECT_EQ(solver.optimizer().state_params(), (std::vector<std::string>{"fc.bias"}));
}

class Recorder : public TrainingObserver {
 public:
  void on_start(const StartInfo& i) override { starts.push_back(i); }
  void on_iteration(const IterationInfo& i) override { iterations.push_back(i); }
  void on_test(const TestInfo& i) override { tests.push_back(i); }
  void on_snapshot(const SnapshotInfo& i) override { snapshots.push_back(i); }
  void on_finish(const FinishInfo& i) override { finishes.push_back(i); }
  std::vector<StartInfo> starts;
  std::vector<IterationInfo> iterations;
  std::vector<TestInfo> tests;
  std::vector<SnapshotInfo> snapshots;
  std::vector<FinishInfo> finishes;
};

// Inputs of the TRAIN and TEST nets are set from outside; an Input layer
// keeps whatever values it holds, so setting them once suffices.
TEST(SolverTest, SolveRunsTestsDisplaysAndSnapshots) {
  TempDir dir;
  SolverConfig config = parse_solver(
      linear_solver("max_iter: 10\ndisplay: 4\ntest_interval: 5\ntest_iter: 2\nsnapshot: 6\n"
                    "average_loss: 3\nlr_policy: \"step\" gamma: 0.5 stepsize: 4\n"),
      dir.file("run.prototxt"));
  Solver solver(config);
  ASSERT_NE(solver.test_net(), nullptr);
  fill_inputs(solver.net());
  fill_inputs(*solver.test_net());
  // The TEST net uses the TRAIN net's weights.
  EXPECT_TRUE(solver.test_net()->params()[0].blob == solver.net().params()[0].blob);
  Recorder rec;
  std::ostringstream console;
  ConsolePrinter printer(console);
  solver.add_observer(&rec);
  solver.add_observer(&printer);
  const SolveResult r = solver.solve();
  EXPECT_EQ(r.status, SolveStatus::kCompleted);
  EXPECT_EQ(r.iter, 10);

  ASSERT_EQ(rec.starts.size(), 1u);
  EXPECT_EQ(rec.starts[0].iter, 0);
  EXPECT_EQ(rec.starts[0].net_name, "linear");
  ASSERT_EQ(rec.iterations.size(), 2u);  // after iterations 4 and 8
  EXPECT_EQ(rec.iterations[0].iter, 4);
  EXPECT_EQ(rec.iterations[1].iter, 8);
  EXPECT_EQ(rec.iterations[1].max_iter, 10);
  EXPECT_DOUBLE_EQ(rec.iterations[0].lr, 0.1);   // iteration index 3 used lr(3)
  EXPECT_DOUBLE_EQ(rec.iterations[1].lr, 0.05);  // iteration index 7
  EXPECT_GE(rec.iterations[0].samples_per_second, 0.0);
  ASSERT_EQ(rec.iterations[0].outputs.size(), 1u);
  EXPECT_EQ(rec.iterations[0].outputs[0].first, "loss");

  ASSERT_EQ(rec.tests.size(), 3u);  // initial, @5, @10
  EXPECT_EQ(rec.tests[0].iter, 0);
  EXPECT_EQ(rec.tests[1].iter, 5);
  EXPECT_EQ(rec.tests[2].iter, 10);
  ASSERT_EQ(rec.tests[2].outputs.size(), 1u);
  EXPECT_EQ(rec.tests[2].outputs[0].first, "loss");
  EXPECT_LT(rec.tests[2].outputs[0].second, rec.tests[0].outputs[0].second);

  ASSERT_EQ(rec.snapshots.size(), 2u);  // @6 and after training @10
  EXPECT_EQ(rec.snapshots[0].iter, 6);
  EXPECT_EQ(rec.snapshots[0].weights_path, dir.file("run_iter_6.safetensors"));
  EXPECT_EQ(rec.snapshots[1].state_path, dir.file("run_iter_10.solverstate.safetensors"));
  EXPECT_EQ(r.last_snapshot, dir.file("run_iter_10.solverstate.safetensors"));
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"run_iter_10.safetensors", "run_iter_10.solverstate.safetensors",
                                                  "run_iter_6.safetensors", "run_iter_6.solverstate.safetensors"}));
  ASSERT_EQ(rec.finishes.size(), 1u);
  EXPECT_EQ(rec.finishes[0].reason, FinishReason::kCompleted);
  EXPECT_EQ(rec.finishes[0].iter, 10);

  // The smoothed loss is the mean of the last average_loss iterations.
  EXPECT_GT(solver.smoothed_loss(), 0.0);
  const std::string text = console.str();
  EXPECT_CONTAINS(text, "iter 4/10  loss ");
  EXPECT_CONTAINS(text, "  lr 0.1  ");
  EXPECT_CONTAINS(text, "iter 8/10  loss ");
  EXPECT_CONTAINS(text, "test @ 0: loss = ");
  EXPECT_CONTAINS(text, "test @ 10: loss = ");
  EXPECT_CONTAINS(text, "snapshot @ 6: ");
  EXPECT_CONTAINS(text, "done: 10 iterations");
}

TEST(SolverTest, NoSnapshotAfterTrainWhenDisabled) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 3 display: 0 snapshot_after_train: false"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  const SolveResult r = solver.solve();
  EXPECT_EQ(r.iter, 3);
  EXPECT_EQ(r.last_snapshot, "");
  EXPECT_TRUE(dir.list().empty());
}

TEST(SolverTest, SnapshotWritingCanBeDisabledForOtherRanks) {
  TempDir dir;
  SolverOptions o;
  o.snapshots = SnapshotWriting::kDisabled;
  Solver solver(parse_solver(linear_solver("max_iter: 4 snapshot: 2"), dir.file("s.prototxt")), o);
  fill_inputs(solver.net());
  solver.solve();
  EXPECT_TRUE(dir.list().empty());
}

// The loss falls steadily on this problem, so "best" by MAX loss is the
// initial test: kept, with the newest, while snapshot_keep: 1 removes the rest.
TEST(SolverTest, SnapshotBestIsKeptBesideTheNewestAndSurvivesResume) {
  TempDir dir;
  const std::string extra =
      "display: 0 test_interval: 2 test_iter: 1 snapshot: 2 snapshot_keep: 1 "
      "snapshot_best: \"loss\" snapshot_best_mode: MAX ";
  SolveResult r;
  {
    Solver solver(parse_solver(linear_solver(extra + "max_iter: 6"), dir.file("s.prototxt")));
    fill_inputs(solver.net());
    fill_inputs(*solver.test_net());
    r = solver.solve();
  }
  EXPECT_EQ(r.best_iter, 0);
  EXPECT_EQ(r.best_weights, dir.file("s_iter_0.safetensors"));
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"s_iter_0.safetensors", "s_iter_0.solverstate.safetensors",
                                                  "s_iter_6.safetensors", "s_iter_6.solverstate.safetensors"}));
  // Resumed, the record carries over: iteration 0 stays the best.
  Solver resumed(parse_solver(linear_solver(extra + "max_iter: 10"), dir.file("s.prototxt")));
  fill_inputs(resumed.net());
  fill_inputs(*resumed.test_net());
  resumed.restore(dir.file("s_iter_6.solverstate.safetensors"));
  const SolveResult r2 = resumed.solve();
  EXPECT_EQ(r2.best_iter, 0);
  EXPECT_DOUBLE_EQ(r2.best_value, r.best_value);
  EXPECT_TRUE(file_exists(dir.file("s_iter_0.safetensors")));
  EXPECT_TRUE(file_exists(dir.file("s_iter_10.safetensors")));
  EXPECT_FALSE(file_exists(dir.file("s_iter_8.safetensors")));
}

TEST(SolverTest, SnapshotBestOfAnOutputTheTestNetLacksNamesItsOutputs) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 4 display: 0 test_interval: 2 test_iter: 1 "
                                           "snapshot_best: \"accuracy\""),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  fill_inputs(*solver.test_net());
  const std::string err = test::error_of<ConfigError>([&] { solver.solve(); });
  EXPECT_NE(err.find("'accuracy' is not an output of the TEST net"), std::string::npos) << err;
  EXPECT_NE(err.find("'loss'"), std::string::npos) << err;
}

TEST(SolverTest, StopFlagSnapshotsAndReportsInterruption) {
  TempDir dir;
  Solver solver(parse_solver(linear_solver("max_iter: 100 display: 0 snapshot_after_train: false"),
                             dir.file("s.prototxt")));
  fill_inputs(solver.net());
  std::atomic<bool> stop{false};
  solver.set_stop_flag(&stop);
  Recorder rec;
  solver.add_observer(&rec);
  // Raise the flag from inside the loop, as a signal handler would.
  test::BeforeUpdate before_update_hook(solver, [&](Net&) {
    if (solver.iter() == 6) stop = true;
  });
  const SolveResult r = solver.solve();
  EXPECT_EQ(r.status, SolveStatus::kInterrupted);
  EXPECT_EQ(r.iter, 7);
  EXPECT_EQ(r.last_snapshot, dir.file("s_iter_7.solverstate.safetensors"));
  EXPECT_TRUE(file_exists(dir.file("s_iter_7.safetensors")));
  ASSERT_EQ(rec.finishes.size(), 1u);
  EXPECT_EQ(rec.finishes[0].reason, FinishReason::kInterrupted);
}

TEST(SolverTest, TestNetFromTrainNetAndTestNetFiles) {
  TempDir dir;
  write_text(dir.file("net.prototxt"), kLinearNet);
  write_text(dir.file("s.prototxt"),
             "train_net: \"net.prototxt\" test_net: \"net.prototxt\" test_iter: 1 test_interval: 1 base_lr: 0.1");
  Solver solver(load_solver_config(dir.file("s.prototxt")));
  ASSERT_NE(solver.test_net(), nullptr);
  EXPECT_EQ(solver.test_net()->phase(), Phase::kTest);
  EXPECT_TRUE(solver.test_net()->params()[1].blob == solver.net().params()[1].blob);

  // train_net alone: no testing even with test_interval.
  write_text(dir.file("t.prototxt"), "train_net: \"net.prototxt\" test_interval: 10 base_lr: 0.1");
  Solver no_test(load_solver_config(dir.file("t.prototxt")));
  EXPECT_EQ(no_test.test_net(), nullptr);
  fill_inputs(no_test.net());
  EXPECT_TRUE(no_test.test().empty());
}

// ---------------------------------------------------------------------------
// Reporting

TEST(TrainingLogTest, Formatting) {
  EXPECT_EQ(format_duration(12), "0:12");
  EXPECT_EQ(format_duration(725), "12:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_number(0.12344), "0.1234");
  EXPECT_EQ(format_number(0.01), "0.01");
  EXPECT_EQ(format_number(1.5e-5), "1.5e-05");
}

TEST(TrainingLogTest, ConsoleLines) {
  std::ostringstream os;
  ConsolePrinter p(os);
  IterationInfo it;
  it.iter = 500;
  it.max_iter = 2000;
  it.loss = 0.12341;
  it.lr = 0.01;
  it.samples_per_second = 1234.4;
  it.eta_seconds = 12;
  it.outputs = {{"loss", 0.2}, {"accuracy", 0.5}};
  p.on_iteration(it);
  TestInfo t;
  t.iter = 500;
  t.outputs = {{"accuracy", 0.973}, {"loss", 0.09}};
  p.on_test(t);
  EXPECT_EQ(os.str(),
            "iter 500/2000  loss 0.1234  lr 0.01  1234 samples/s  ETA 0:12  accuracy 0.5\n"
            "test @ 500: accuracy = 0.973, loss = 0.09\n");
}

TEST(TrainingLogTest, JsonLinesOnePerEventFlushed) {
  TempDir dir;
  const std::string path = dir.file("log.jsonl");
  {
    JsonLinesLog log(path, LogMode::kTruncate);
    IterationInfo it;
    it.iter = 100;
    it.max_iter = 200;
    it.loss = 0.5;
    it.lr = 0.01;
    it.samples_per_second = 300;
    it.elapsed_seconds = 1.25;
    it.outputs = {{"accuracy", 0.75}};
    log.on_iteration(it);
    // Flushed per line: readable before the writer closes.
    EXPECT_EQ(read_file_bytes(path).back(), '\n');
    TestInfo t;
    t.iter = 100;
    t.outputs = {{"accuracy", 0.9}, {"loss", std::nan("")}};
    log.on_test(t);
  }
  {
    JsonLinesLog log(path, LogMode::kAppend);
    FinishInfo f;
    f.iter = 200;
    f.reason = FinishReason::kInterrupted;
    log.on_finish(f);
  }
  std::istringstream lines(read_file_bytes(path));
  std::vector<JsonValue> events;
  for (std::string line; std::getline(lines, line);) events.push_back(parse_json(line));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].find("event")->as_string(), "iteration");
  EXPECT_EQ(events[0].find("iter")->as_number(), 100);
  EXPECT_EQ(events[0].find("loss")->as_number(), 0.5);
  EXPECT_EQ(events[0].find("lr")->as_number(), 0.01);
  EXPECT_EQ(events[0].find("samples_per_s")->as_number(), 300);
  EXPECT_EQ(events[0].find("time_s")->as_number(), 1.25);
  EXPECT_EQ(events[0].find("outputs")->find("accuracy")->as_number(), 0.75);
  EXPECT_EQ(events[1].find("event")->as_string(), "test");
  EXPECT_EQ(events[1].find("outputs")->find("accuracy")->as_number(), 0.9);
  EXPECT_TRUE(events[1].find("outputs")->find("loss")->is_null());
  EXPECT_EQ(events[2].find("event")->as_string(), "finish");
  EXPECT_EQ(events[2].find("status")->as_string(), "interrupted");

  EXPECT_THROW(JsonLinesLog(dir.file("no/such/dir/log.jsonl"), LogMode::kTruncate), IoError);
}

TEST(TrainingLogTest, SolveWritesJsonLog) {
  TempDir dir;
  SolverConfig config = parse_solver(linear_solver("max_iter: 4 display: 2 test_interval: 2 test_iter: 1"),
                                     dir.file("s.prototxt"));
  Solver solver(config);
  fill_inputs(solver.net());
  fill_inputs(*solver.test_net());
  {
    JsonLinesLog log(config.log, LogMode::kTruncate);
    solver.add_observer(&log);
    solver.solve();
  }
  std::istringstream lines(read_file_bytes(dir.file("s_log.jsonl")));
  std::vector<std::string> kinds;
  for (std::string line; std::getline(lines, line);) kinds.push_back(parse_json(line).find("event")->as_string());
  EXPECT_EQ(kinds, (std::vector<std::string>{"start", "test", "iteration", "test", "iteration", "test", "snapshot",
                                             "finish"}));
}

}  // namespace
}  // namespace strata
