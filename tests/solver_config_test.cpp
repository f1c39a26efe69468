// Solver configuration, learning-rate policies, the update rules on
// hand-made parameters and gradient clipping: the parts of a solver that need
// no Net. The Solver loop itself is in solver_test.cpp; numbers against
// PyTorch in solver_golden_test.cpp.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/solver/lr_policy.h"
#include "framework/solver/optimizer.h"
#include "framework/solver/solver_config.h"
#include "tests/solver_test_util.h"

namespace strata {
namespace {

using solver_test::error_of;
using solver_test::parse_solver;
using solver_test::TempDir;
using solver_test::write_text;

// ---------------------------------------------------------------------------
// SolverConfig

TEST(SolverConfigTest, ReadsCaffeLenetSolverAsWritten) {
  const SolverConfig c = parse_solver(R"(
# The train/test net protocol buffer definition
net: "lenet_train_test.prototxt"
test_iter: 100
test_interval: 500
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: 10000
snapshot: 5000
snapshot_prefix: "examples/mnist/lenet"
solver_mode: GPU
)");
  EXPECT_EQ(c.net, "/work/exp/lenet_train_test.prototxt");
  EXPECT_EQ(c.test_iter, 100);
  EXPECT_EQ(c.test_interval, 500);
  EXPECT_TRUE(c.test_initialization);
  EXPECT_DOUBLE_EQ(c.lr.base_lr, 0.01);
  EXPECT_EQ(c.lr.policy, LrPolicy::kInv);
  EXPECT_DOUBLE_EQ(c.lr.gamma, 0.0001);
  EXPECT_DOUBLE_EQ(c.lr.power, 0.75);
  EXPECT_EQ(c.lr.max_iter, 10000);
  EXPECT_EQ(c.optimizer.type, SolverType::kSGD);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0005);
  EXPECT_EQ(c.snapshot, 5000);
  EXPECT_EQ(c.snapshot_prefix, "/work/exp/examples/mnist/lenet");
  EXPECT_EQ(c.log, "/work/exp/examples/mnist/lenet_log.jsonl");
  EXPECT_EQ(c.solver_mode, SolverMode::kGPU);
  EXPECT_EQ(c.display, 100);
  EXPECT_EQ(c.iter_size, 1);
}

TEST(SolverConfigTest, Defaults) {
  const SolverConfig c = parse_solver("net: \"/abs/net.prototxt\" base_lr: 0.1");
  EXPECT_EQ(c.net, "/abs/net.prototxt");
  EXPECT_EQ(c.lr.policy, LrPolicy::kFixed);
  EXPECT_EQ(c.max_iter, 0);
  EXPECT_EQ(c.display, 100);
  EXPECT_EQ(c.average_loss, 1);
  EXPECT_EQ(c.iter_size, 1);
  EXPECT_EQ(c.test_interval, 0);
  EXPECT_EQ(c.snapshot, 0);
  EXPECT_EQ(c.snapshot_after_train, SnapshotAfterTrain::kYes);
  EXPECT_EQ(c.random_seed, 1u);
  EXPECT_EQ(c.optimizer.type, SolverType::kSGD);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.0);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.delta, 1e-8);
  EXPECT_EQ(c.optimizer.regularization, Regularization::kL2);
  EXPECT_LE(c.clip_gradients, 0.0);
  // Caffe's default snapshot prefix: the solver file without its extension.
  EXPECT_EQ(c.snapshot_prefix, "/work/exp/solver");
  EXPECT_EQ(c.log, "/work/exp/solver_log.jsonl");
  EXPECT_EQ(c.base_dir, "/work/exp");
}

TEST(SolverConfigTest, SolverTypes) {
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"Nesterov\"").optimizer.type, SolverType::kNesterov);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"AdamW\"").optimizer.type, SolverType::kAdamW);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"adam\"").optimizer.type, SolverType::kAdam);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 solver_type: NESTEROV").optimizer.type, SolverType::kNesterov);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 solver_type: ADAM").optimizer.type, SolverType::kAdam);
  // Adam's beta1 comes from momentum; PyTorch's 0.9 when absent.
  EXPECT_DOUBLE_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"Adam\"").optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"Adam\" momentum: 0.8").optimizer.momentum, 0.8);

  // Caffe's adaptive solvers, in its spelling and as its legacy enum.
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"AdaGrad\"").optimizer.type, SolverType::kAdaGrad);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"AdaDelta\"").optimizer.type, SolverType::kAdaDelta);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"RMSProp\"").optimizer.type, SolverType::kRMSProp);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 solver_type: ADAGRAD").optimizer.type, SolverType::kAdaGrad);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 solver_type: ADADELTA").optimizer.type, SolverType::kAdaDelta);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 solver_type: RMSPROP").optimizer.type, SolverType::kRMSProp);
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 1 solver_type: SGD").optimizer.type, SolverType::kSGD);
  EXPECT_DOUBLE_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"RMSProp\"").optimizer.rms_decay, 0.99);
  EXPECT_DOUBLE_EQ(parse_solver("net: \"n\" base_lr: 1 type: \"RMSProp\" rms_decay: 0.98").optimizer.rms_decay,
                   0.98);
  // Caffe's mnist_autoencoder_solver_adadelta.prototxt: momentum is AdaDelta's decay.
  const SolverConfig ada =
      parse_solver("net: \"n\" base_lr: 1.0 momentum: 0.95 delta: 1e-6 type: \"AdaDelta\" weight_decay: 0.0005");
  EXPECT_DOUBLE_EQ(ada.optimizer.momentum, 0.95);
  EXPECT_DOUBLE_EQ(ada.optimizer.delta, 1e-6);

  std::string e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"AdaGrad\" momentum: 0.9"); });
  EXPECT_CONTAINS(e, "solver.prototxt:1:");
  EXPECT_CONTAINS(e, "momentum cannot be used with AdaGrad");
  e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"RMSProp\" momentum: 0.9"); });
  EXPECT_CONTAINS(e, "momentum cannot be used with RMSProp");
  e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"RMSProp\" rms_decay: 1.5"); });
  EXPECT_CONTAINS(e, "rms_decay must be in [0, 1]");
  e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"AdaGrad\" solver_type: RMSPROP"); });
  EXPECT_CONTAINS(e, "contradicts");
  e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"Adan\""); });
  EXPECT_CONTAINS(e, "Adam");
  e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"SGD\" solver_type: ADAM"); });
  EXPECT_CONTAINS(e, "contradicts");
}

TEST(SolverConfigTest, UnknownKeyNamesNearest) {
  const std::string e = error_of<ConfigError>([] { parse_solver("net: \"n\"\nbase_lr: 1\nmomentun: 0.9\n"); });
  EXPECT_CONTAINS(e, "momentun");
  EXPECT_CONTAINS(e, "did you mean 'momentum'");
  EXPECT_CONTAINS(e, "solver.prototxt:3:1");
}

TEST(SolverConfigTest, ValidatesValuesWithKeyAndLocation) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"net: \"n\"\nbase_lr: -0.1", "solver.prototxt:2:1: base_lr must be > 0"},
      {"net: \"n\"\nbase_lr: 0", "base_lr must be > 0"},
      {"net: \"n\"", "base_lr"},
      {"net: \"n\" base_lr: 1\nmax_iter: -5", "solver.prototxt:2:1: max_iter must be >= 0"},
      {"net: \"n\" base_lr: 1 lr_policy: \"step\" gamma: 0.1", "needs stepsize"},
      {"net: \"n\" base_lr: 1 lr_policy: \"step\" gamma: 0.1 stepsize: 0", "stepsize must be > 0"},
      {"net: \"n\" base_lr: 1 lr_policy: \"step\" stepsize: 10", "needs gamma"},
      {"net: \"n\" base_lr: 1 lr_policy: \"multistep\" gamma: 0.1 stepvalue: 10 stepvalue: 5",
       "strictly increasing"},
      {"net: \"n\" base_lr: 1 lr_policy: \"poly\" power: 1", "max_iter must be > 0"},
      {"net: \"n\" base_lr: 1 lr_policy: \"cosine\" max_iter: 10 min_lr: 2", "min_lr must be in"},
      {"net: \"n\" base_lr: 1 lr_policy: \"stp\"", "did you mean 'step'"},
      {"net: \"n\" base_lr: 1 momentum: 1.5", "momentum must be in [0, 1)"},
      {"net: \"n\" base_lr: 1 weight_decay: -1", "weight_decay must be >= 0"},
      {"net: \"n\" base_lr: 1 iter_size: 0", "iter_size must be >= 1"},
      {"net: \"n\" base_lr: 1 average_loss: 0", "average_loss must be >= 1"},
      {"net: \"n\" base_lr: 1 warmup_start_factor: 2", "warmup_start_factor must be in [0, 1]"},
      {"net: \"n\" base_lr: 1 type: \"AdamW\" regularization_type: \"L1\"", "L1 cannot be used with AdamW"},
      {"net: \"n\" base_lr: 1 test_interval: 100", "test_iter"},
      {"base_lr: 1", "names no net"},
      {"net: \"n\" train_net: \"t\" base_lr: 1", "exactly one of"},
      {"net: \"n\" test_net: \"t\" base_lr: 1", "test_net needs train_net"},
      {"net: \"n\" base_lr: 1 regularization_type: \"L3\"", "L2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string e = error_of<ConfigError>([&] { parse_solver(c.text); });
    EXPECT_CONTAINS(e, c.expect);
  }
}

TEST(SolverConfigTest, TrainAndTestNetsAndRepeatedKeys) {
  const SolverConfig c = parse_solver(R"(
train_net: "train.prototxt"
test_net: "sub/test.prototxt"
test_iter: 7
test_iter: 9
test_interval: 10
base_lr: 0.1
lr_policy: "multistep"
gamma: 0.5
stepvalue: 100
stepvalue: 200
log: "logs/run.jsonl"
snapshot_prefix: "/abs/snap"
iter_size: 4
clip_gradients: 10
average_loss: 20
test_initialization: false
snapshot_after_train: false
random_seed: 42
debug_info: true
device_id: 1
)");
  EXPECT_EQ(c.train_net, "/work/exp/train.prototxt");
  EXPECT_EQ(c.test_net, "/work/exp/sub/test.prototxt");
  EXPECT_EQ(c.test_iter, 7);  // the first of repeated test_iter values
  EXPECT_EQ(c.lr.stepvalues, (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(c.log, "/work/exp/logs/run.jsonl");
  EXPECT_EQ(c.snapshot_prefix, "/abs/snap");
  EXPECT_EQ(c.iter_size, 4);
  EXPECT_DOUBLE_EQ(c.clip_gradients, 10.0);
  EXPECT_EQ(c.average_loss, 20);
  EXPECT_FALSE(c.test_initialization);
  EXPECT_EQ(c.snapshot_after_train, SnapshotAfterTrain::kNo);
  EXPECT_EQ(c.random_seed, 42u);
}

TEST(SolverConfigTest, FingerprintFollowsTrainingSettingsOnly) {
  const SolverConfig a = parse_solver("net: \"n\" base_lr: 0.1 max_iter: 100 display: 10");
  const SolverConfig b = parse_solver("net: \"n\" base_lr: 0.1 max_iter: 100 display: 50 snapshot: 7");
  const SolverConfig c = parse_solver("net: \"n\" base_lr: 0.2 max_iter: 100");
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), c.fingerprint());
  EXPECT_EQ(a.fingerprint().size(), 16u);
  // A longer run keeps the fingerprint, unless the schedule spans max_iter.
  EXPECT_EQ(a.fingerprint(), parse_solver("net: \"n\" base_lr: 0.1 max_iter: 500").fingerprint());
  EXPECT_NE(parse_solver("net: \"n\" base_lr: 0.1 max_iter: 100 lr_policy: \"cosine\"").fingerprint(),
            parse_solver("net: \"n\" base_lr: 0.1 max_iter: 500 lr_policy: \"cosine\"").fingerprint());
}

TEST(SolverConfigTest, FingerprintOfOlderSnapshotsStaysTheSame) {
  // Snapshots written before the settings were kept by name hold this value
  // for this solver; a changed value would call every resume "changed".
  EXPECT_EQ(parse_solver("net: \"n\" base_lr: 0.1 max_iter: 100", "/w/s.prototxt").fingerprint(), "762f509919541b97");
  EXPECT_EQ(parse_solver("net: \"n\" type: \"AdamW\" base_lr: 0.001 lr_policy: \"cosine\" max_iter: 300 "
                         "warmup_iter: 10 layer_decay: 0.75 stepvalue: 5 stepvalue: 9",
                         "/w/s.prototxt")
                .fingerprint(),
            "f4928bfc17a8926e");
}

TEST(SolverConfigTest, SettingsChangeNamesEachSettingWithBothValues) {
  const SolverConfig a = parse_solver("net: \"n\" base_lr: 0.1 momentum: 0.9 max_iter: 100");
  const SolverConfig b = parse_solver("net: \"n\" base_lr: 0.05 momentum: 0.9 max_iter: 100 clip_gradients: 5");
  EXPECT_EQ(describe_settings_change(a.training_settings(), a.training_settings()), "");
  EXPECT_EQ(describe_settings_change(a.training_settings(), b.training_settings()),
            "base_lr 0.1 -> 0.05, clip -1 -> 5");
  // A setting only one side has (max_iter counts for cosine only).
  const SolverConfig cos = parse_solver("net: \"n\" base_lr: 0.1 momentum: 0.9 max_iter: 100 lr_policy: \"cosine\"");
  EXPECT_EQ(describe_settings_change(a.training_settings(), cos.training_settings()),
            "policy fixed -> cosine, max_iter (none) -> 100");
  EXPECT_EQ(describe_settings_change(cos.training_settings(), a.training_settings()),
            "policy cosine -> fixed, max_iter 100 -> (none)");
}

TEST(SolverConfigTest, SnapshotBestDirection) {
  const std::string tested = "net: \"n\" base_lr: 0.1 test_iter: 1 test_interval: 10 ";
  EXPECT_EQ(parse_solver(tested + "snapshot_best: \"accuracy\"").snapshot_best_is, BestIs::kHigher);
  EXPECT_EQ(parse_solver(tested + "snapshot_best: \"test_loss\"").snapshot_best_is, BestIs::kLower);
  EXPECT_EQ(parse_solver(tested + "snapshot_best: \"top1_error\"").snapshot_best_is, BestIs::kLower);
  EXPECT_EQ(parse_solver(tested + "snapshot_best: \"loss\" snapshot_best_mode: MAX").snapshot_best_is,
            BestIs::kHigher);
  EXPECT_EQ(parse_solver(tested + "snapshot_best: \"accuracy\" snapshot_best_mode: MIN").snapshot_best_is,
            BestIs::kLower);
  const std::string err = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 0.1 snapshot_best: \"accuracy\""); });
  EXPECT_NE(err.find("snapshot_best"), std::string::npos) << err;
  EXPECT_NE(err.find("test_interval"), std::string::npos) << err;
}

TEST(SolverConfigTest, LoadFromFileResolvesAgainstItsFolder) {
  TempDir dir;
  write_text(dir.file("s.prototxt"), "net: \"net.prototxt\" base_lr: 0.1");
  const SolverConfig c = load_solver_config(dir.file("s.prototxt"));
  EXPECT_EQ(c.net, dir.file("net.prototxt"));
  EXPECT_EQ(c.snapshot_prefix, dir.file("s"));
  EXPECT_THROW(load_solver_config(dir.file("absent.prototxt")), IoError);
}

// ---------------------------------------------------------------------------
// Learning-rate policies (Caffe's formulas)

TEST(LrPolicyTest, CaffeFormulas) {
  LrSchedule s;
  s.base_lr = 0.1;
  s.gamma = 0.5;
  s.power = 0.75;
  s.stepsize = 3;
  s.max_iter = 10;
  s.policy = LrPolicy::kFixed;
  EXPECT_DOUBLE_EQ(learning_rate(s, 7), 0.1);
  s.policy = LrPolicy::kStep;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(s, 7), 0.025);
  s.policy = LrPolicy::kExp;
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 0.1 * 0.125);
  s.policy = LrPolicy::kInv;
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 0.1 * std::pow(1.0 + 0.5 * 4, -0.75));
  s.policy = LrPolicy::kPoly;
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 0.1 * std::pow(1.0 - 0.4, 0.75));
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 0.0);
  s.policy = LrPolicy::kSigmoid;
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 0.1 / (1.0 + std::exp(-0.5 * (5 - 3))));
  s.policy = LrPolicy::kMultiStep;
  s.stepvalues = {2, 5};
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 0.025);
  EXPECT_DOUBLE_EQ(learning_rate(s, 100), 0.025);
  s.policy = LrPolicy::kCosine;
  s.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.1);
  EXPECT_NEAR(learning_rate(s, 5), 0.01 + 0.09 * 0.5, 1e-15);
  EXPECT_NEAR(learning_rate(s, 10), 0.01, 1e-15);
  EXPECT_NEAR(learning_rate(s, 3), 0.01 + 0.09 * (1 + std::cos(M_PI * 0.3)) / 2, 1e-15);
}

TEST(LrPolicyTest, LinearWarmupOnTop) {
  LrSchedule s;
  s.base_lr = 0.2;
  s.policy = LrPolicy::kStep;
  s.gamma = 0.1;
  s.stepsize = 2;
  s.warmup_iter = 4;
  s.warmup_start_factor = 0.2;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.2 * 0.2);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.2 * (0.2 + 0.8 * 0.25));
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 0.02 * (0.2 + 0.8 * 0.75));
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 0.002);
  s.warmup_start_factor = 0.0;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.0);
}

TEST(LrPolicyTest, Names) {
  for (const std::string& n : lr_policy_names()) EXPECT_EQ(lr_policy_name(parse_lr_policy(n)), n);
  EXPECT_THROW(parse_lr_policy("linear"), ConfigError);
}

// ---------------------------------------------------------------------------
// Update rules on hand-made parameters

NetParam make_param(const std::string& name, const std::vector<float>& w, const std::vector<float>& g,
                    float lr_mult = 1.0f, float decay_mult = 1.0f, Learnable learnable = Learnable::kYes) {
  NetParam p;
  p.name = name;
  p.blob = std::make_shared<Blob>(Shape{static_cast<int64_t>(w.size())});
  std::copy(w.begin(), w.end(), p.blob->data.data<float>());
  std::copy(g.begin(), g.end(), p.blob->diff.data<float>());
  p.lr_mult = lr_mult;
  p.decay_mult = decay_mult;
  p.learnable = learnable;
  return p;
}

std::vector<float> values(const NetParam& p) {
  const float* d = p.blob->data.data<float>();
  return std::vector<float>(d, d + p.blob->numel());
}

void set_grad(NetParam& p, const std::vector<float>& g) { std::copy(g.begin(), g.end(), p.blob->diff.data<float>()); }

TEST(OptimizerTest, CaffeSgdWithMomentumDecayAndMultipliers) {
  OptimizerOptions o;
  o.type = SolverType::kSGD;
  o.momentum = 0.9;
  o.weight_decay = 0.1;
  std::vector<NetParam> params = {make_param("a", {1.0f, -2.0f}, {0.5f, 0.25f}, 2.0f, 0.5f),
                                  make_param("frozen", {3.0f}, {1.0f}, 0.0f),
                                  make_param("stats", {4.0f}, {1.0f}, 1.0f, 1.0f, Learnable::kNo)};
  auto opt = make_optimizer(o);
  EXPECT_EQ(opt->slot_names(), (std::vector<std::string>{"momentum"}));
  opt->prepare(params);
  EXPECT_EQ(opt->state_params(), (std::vector<std::string>{"a"}));
  const double lr = 0.1;
  // v = 0.9 v + lr*2 * (g + 0.05 w); w -= v
  double v0 = 0.2 * (0.5 + 0.05 * 1.0), v1 = 0.2 * (0.25 + 0.05 * -2.0);
  double w0 = 1.0 - v0, w1 = -2.0 - v1;
  opt->update(params, lr);
  EXPECT_NEAR(values(params[0])[0], w0, 1e-6);
  EXPECT_NEAR(values(params[0])[1], w1, 1e-6);
  set_grad(params[0], {-1.0f, 1.0f});
  v0 = 0.9 * v0 + 0.2 * (-1.0 + 0.05 * w0);
  v1 = 0.9 * v1 + 0.2 * (1.0 + 0.05 * w1);
  w0 -= v0;
  w1 -= v1;
  opt->update(params, lr);
  EXPECT_NEAR(values(params[0])[0], w0, 1e-6);
  EXPECT_NEAR(values(params[0])[1], w1, 1e-6);
  // Frozen parameters and buffers are untouched, gradients are left as they were.
  EXPECT_EQ(values(params[1])[0], 3.0f);
  EXPECT_EQ(values(params[2])[0], 4.0f);
  EXPECT_EQ(params[0].blob->diff.data<float>()[0], -1.0f);
  EXPECT_EQ(opt->steps(), 2);
  const auto state = opt->state_tensors();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "a.momentum");
  EXPECT_NEAR(state[0].second.data<float>()[0], v0, 1e-6);
}

TEST(OptimizerTest, NesterovMatchesCaffeFormula) {
  OptimizerOptions o;
  o.type = SolverType::kNesterov;
  o.momentum = 0.5;
  std::vector<NetParam> params = {make_param("p", {1.0f}, {1.0f})};
  auto opt = make_optimizer(o);
  opt->prepare(params);
  double w = 1.0, v = 0.0;
  for (float g : {1.0f, -0.5f, 2.0f}) {
    set_grad(params[0], {g});
    const double v_new = 0.5 * v + 0.1 * g;
    w -= 1.5 * v_new - 0.5 * v;
    v = v_new;
    opt->update(params, 0.1);
    EXPECT_NEAR(values(params[0])[0], w, 1e-6);
  }
}

TEST(OptimizerTest, L1Regularization) {
  OptimizerOptions o;
  o.weight_decay = 0.5;
  o.regularization = Regularization::kL1;
  std::vector<NetParam> params = {make_param("p", {2.0f, -3.0f, 0.0f}, {0.0f, 0.0f, 0.0f})};
  auto opt = make_optimizer(o);
  opt->prepare(params);
  opt->update(params, 0.1);
  EXPECT_NEAR(values(params[0])[0], 2.0 - 0.05, 1e-6);
  EXPECT_NEAR(values(params[0])[1], -3.0 + 0.05, 1e-6);
  EXPECT_EQ(values(params[0])[2], 0.0f);
}

TEST(OptimizerTest, AdamAndAdamWFollowPyTorch) {
  for (SolverType type : {SolverType::kAdam, SolverType::kAdamW}) {
    SCOPED_TRACE(solver_type_name(type));
    OptimizerOptions o;
    o.type = type;
    o.momentum = 0.9;
    o.momentum2 = 0.99;
    o.delta = 1e-3;
    o.weight_decay = 0.1;
    std::vector<NetParam> params = {make_param("p", {1.0f}, {0.0f})};
    auto opt = make_optimizer(o);
    EXPECT_EQ(opt->slot_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
    opt->prepare(params);
    double w = 1.0, m = 0.0, s = 0.0;
    const double lr = 0.05;
    int t = 0;
    for (float g0 : {0.3f, -0.2f, 0.5f}) {
      ++t;
      set_grad(params[0], {g0});
      double g = g0;
      if (type == SolverType::kAdamW) {
        w *= 1.0 - lr * 0.1;
      } else {
        g += 0.1 * w;
      }
      m = 0.9 * m + 0.1 * g;
      s = 0.99 * s + 0.01 * g * g;
      const double denom = std::sqrt(s) / std::sqrt(1.0 - std::pow(0.99, t)) + 1e-3;
      w -= lr / (1.0 - std::pow(0.9, t)) * m / denom;
      opt->update(params, lr);
      EXPECT_NEAR(values(params[0])[0], w, 1e-6);
    }
    const auto state = opt->state_tensors();
    ASSERT_EQ(state.size(), 2u);
    EXPECT_EQ(state[0].first, "p.exp_avg");
    EXPECT_EQ(state[1].first, "p.exp_avg_sq");
    EXPECT_NEAR(state[0].second.data<float>()[0], m, 1e-6);
    EXPECT_NEAR(state[1].second.data<float>()[0], s, 1e-7);
  }
}

TEST(OptimizerTest, UpdateBeforePrepareIsAnError) {
  std::vector<NetParam> params = {make_param("p", {1.0f}, {1.0f})};
  auto opt = make_optimizer(OptimizerOptions{});
  EXPECT_THROW(opt->update(params, 0.1), Error);
}

TEST(OptimizerTest, LargeParameterIsUpdatedEverywhere) {
  // Large enough to be split across threads.
  const int64_t n = (1 << 17) + 3;
  std::vector<float> w(n), g(n);
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(i % 97), g[i] = static_cast<float>(i % 13) - 6.0f;
  std::vector<NetParam> params = {make_param("big", w, g)};
  OptimizerOptions o;
  o.momentum = 0.9;
  auto opt = make_optimizer(o);
  opt->prepare(params);
  opt->update(params, 0.5);
  const float* out = params[0].blob->data.data<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], w[i] - 0.5f * g[i]) << i;
}

TEST(ClipTest, GlobalNormLikePyTorch) {
  std::vector<NetParam> params = {make_param("a", {0.0f, 0.0f}, {3.0f, 0.0f}),
                                  make_param("b", {0.0f}, {4.0f}),
                                  make_param("frozen", {0.0f}, {100.0f}, 0.0f)};
  // Norm 5 (the frozen gradient does not count); clip to 1: scale 1 / (5 + 1e-6).
  EXPECT_DOUBLE_EQ(clip_gradients(params, 1.0), 5.0);
  const float scale = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(params[0].blob->diff.data<float>()[0], 3.0f * scale);
  EXPECT_FLOAT_EQ(params[1].blob->diff.data<float>()[0], 4.0f * scale);
  EXPECT_EQ(params[2].blob->diff.data<float>()[0], 100.0f);
  // Below the threshold nothing changes; <= 0 disables clipping.
  const float before = params[0].blob->diff.data<float>()[0];
  EXPECT_NEAR(clip_gradients(params, 10.0), 1.0, 1e-5);
  EXPECT_EQ(params[0].blob->diff.data<float>()[0], before);
  EXPECT_EQ(clip_gradients(params, 0.0), 0.0);
  EXPECT_EQ(clip_gradients(params, -1.0), 0.0);
}

TEST(ClipTest, ScaleGradientsSkipsFrozen) {
  std::vector<NetParam> params = {make_param("a", {0.0f}, {2.0f}), make_param("f", {0.0f}, {2.0f}, 0.0f)};
  scale_gradients(params, 0.25f);
  EXPECT_EQ(params[0].blob->diff.data<float>()[0], 0.5f);
  EXPECT_EQ(params[1].blob->diff.data<float>()[0], 2.0f);
}

}  // namespace
}  // namespace strata
