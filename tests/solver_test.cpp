// Solver configuration, learning-rate policies, the update rules on
// hand-made parameters, gradient clipping, and the Solver loop itself
// (iter_size, the before_update hook, tests, display, snapshots, the stop
// flag) with its console and JSON-lines reporting. Numbers against PyTorch
// are in solver_golden_test.cpp; snapshots and resume in checkpoint_test.cpp.
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

#include "framework/config.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/json.h"
#include "framework/lr_policy.h"
#include "framework/optimizer.h"
#include "framework/solver.h"
#include "framework/solver_config.h"
#include "framework/training_log.h"

namespace strata {
namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "missing '" << (part) << "' in: " << (text)

template <typename E, typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/strata_solver_test_XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") out.push_back(n);
      }
      closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

SolverConfig parse_solver(const std::string& text, const std::string& source = "/work/exp/solver.prototxt") {
  return parse_solver_config(parse_config_text(text, source), source);
}

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

  std::string e = error_of<ConfigError>([] { parse_solver("net: \"n\" base_lr: 1 type: \"RMSProp\""); });
  EXPECT_CONTAINS(e, "not supported");
  EXPECT_CONTAINS(e, "solver.prototxt:1:");
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

// ---------------------------------------------------------------------------
// The Solver loop

// A 4 -> 3 linear classifier on a fixed batch set through an Input layer.
const char* kLinearNet = R"(
  name: "linear"
  layer { name: "input" type: "Input" top: "data" top: "label"
          input_param { shape { dim: 6 dim: 4 } shape { dim: 6 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score"
          inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
)";

std::string linear_solver(const std::string& extra) {
  return std::string("net_param {") + kLinearNet + "}\nbase_lr: 0.1\n" + extra;
}

void fill_inputs(Net& net) {
  float* x = net.blob("data").data.data<float>();
  for (int i = 0; i < 24; ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  float* y = net.blob("label").data.data<float>();
  for (int i = 0; i < 6; ++i) y[i] = static_cast<float>(i % 3);
}

std::vector<float> all_weights(Net& net) {
  std::vector<float> out;
  for (const NetParam& p : net.params()) {
    const float* d = p.blob->data.data<float>();
    out.insert(out.end(), d, d + p.blob->numel());
  }
  return out;
}

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
  solver.set_before_update([&](Net& net) {
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
  solver.set_before_update([&](Net&) {
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
