// Caffe's nets and solvers as Caffe users have them: NetState rules (stage,
// level) and the solver's train_state/test_state, a loss layer without a
// top, V1 files upgraded on load, Pooling's ceil_mode, every problem of a net
// in one error, Caffe layer types strata lacks named as such, and solver
// paths looked up in the working directory first.
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/caffe/caffe_layer_types.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/input_path.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/caffe/net_upgrade.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::build_error;
using test::error_of;
using test::layer_names;
using test::TempDir;
using test::write_text;

std::unique_ptr<Net> net_in_state(const std::string& text, Phase phase, NetStateSpec state) {
  NetOptions options;
  options.phase = phase;
  options.state = std::move(state);
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), options);
}

// The layers the rules chose (without the Splits inserted after "in").
std::vector<std::string> chosen(const Net& net) {
  std::vector<std::string> out;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i).type() != "Split") out.push_back(net.layer(i).name());
  }
  return out;
}

NetStateSpec stages(std::vector<std::string> s, int64_t level = 0) {
  NetStateSpec spec;
  spec.stages = std::move(s);
  spec.level = level;
  return spec;
}

// ------------------------------------------------ NetState rules ----

const char* kStagedNet = R"(
name: "staged"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "stage_a" type: "ReLU" bottom: "x" top: "a" include { stage: "a" } }
layer { name: "stage_a_and_b" type: "ReLU" bottom: "x" top: "ab" include { stage: "a" stage: "b" } }
layer { name: "stage_a_or_b" type: "ReLU" bottom: "x" top: "aob" include { stage: "a" } include { stage: "b" } }
layer { name: "not_b" type: "ReLU" bottom: "x" top: "nb" include { not_stage: "b" } }
layer { name: "level_1_up" type: "ReLU" bottom: "x" top: "l1" include { min_level: 1 } }
layer { name: "level_0_down" type: "ReLU" bottom: "x" top: "l0" include { max_level: 0 } }
layer { name: "test_and_a" type: "ReLU" bottom: "x" top: "ta" include { phase: TEST stage: "a" } }
layer { name: "excluded_in_a" type: "ReLU" bottom: "x" top: "ea" exclude { stage: "a" } }
layer { name: "excluded_level_2" type: "ReLU" bottom: "x" top: "e2" exclude { min_level: 2 } }
)";

TEST(NetStateRules, MatchAsCaffesStateMeetsRule) {
  EXPECT_EQ(chosen(*net_in_state(kStagedNet, Phase::kTrain, {})),
            (std::vector<std::string>{"in", "not_b", "level_0_down", "excluded_in_a", "excluded_level_2"}));
  EXPECT_EQ(chosen(*net_in_state(kStagedNet, Phase::kTrain, stages({"a"}))),
            (std::vector<std::string>{"in", "stage_a", "stage_a_or_b", "not_b", "level_0_down",
                                      "excluded_level_2"}));
  EXPECT_EQ(chosen(*net_in_state(kStagedNet, Phase::kTest, stages({"b", "a"}))),
            (std::vector<std::string>{"in", "stage_a", "stage_a_and_b", "stage_a_or_b", "level_0_down", "test_and_a",
                                      "excluded_level_2"}));
  EXPECT_EQ(chosen(*net_in_state(kStagedNet, Phase::kTrain, stages({"b"}, 1))),
            (std::vector<std::string>{"in", "stage_a_or_b", "level_1_up", "excluded_in_a", "excluded_level_2"}));
  EXPECT_EQ(chosen(*net_in_state(kStagedNet, Phase::kTrain, stages({}, 2))),
            (std::vector<std::string>{"in", "not_b", "level_1_up", "excluded_in_a"}));
}

TEST(NetStateRules, NetFileStateMergesUnderTheSolversState) {
  const std::string text = std::string(kStagedNet) + "state { level: 1 stage: \"a\" }\n";
  // The file's own state: level 1, stage a.
  const auto own = net_in_state(text, Phase::kTrain, {});
  EXPECT_EQ(own->state().level, 1);
  EXPECT_EQ(own->state().stages, (std::vector<std::string>{"a"}));
  // A level given by the solver replaces the file's; stages add up (protobuf MergeFrom).
  const auto merged = net_in_state(text, Phase::kTest, stages({"b"}, 0));
  EXPECT_EQ(merged->state().level, 0);
  EXPECT_EQ(merged->state().stages, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(merged->phase(), Phase::kTest);
  // A phase in the solver's state replaces the one asked for, as in Caffe.
  NetStateSpec train;
  train.phase = Phase::kTrain;
  EXPECT_EQ(net_in_state(text, Phase::kTest, train)->phase(), Phase::kTrain);
}

TEST(NetStateRules, UnknownRuleAndStateKeysNameTheNearest) {
  EXPECT_CONTAINS(build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" include { stages: "a" } }
)"),
                  "did you mean 'stage'?");
  EXPECT_CONTAINS(build_error(R"(
state { levl: 2 }
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }
)"),
                  "did you mean 'level'?");
}

// Caffe's mnist_autoencoder_solver*.prototxt: two test nets by stage.
TEST(NetStateRules, SolverTrainAndTestStatesChooseLayers) {
  const char* net = R"(
  layer { name: "in" type: "Input" top: "data" top: "label"
          input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score" inner_product_param { num_output: 2 } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
  layer { name: "on_train" type: "Accuracy" bottom: "score" bottom: "label" top: "acc_train"
          include { phase: TEST stage: "test-on-train" } }
  layer { name: "on_test" type: "Accuracy" bottom: "score" bottom: "label" top: "acc_test"
          include { phase: TEST stage: "test-on-test" } }
  layer { name: "deep" type: "ReLU" bottom: "score" top: "deep" include { phase: TRAIN min_level: 3 } }
)";
  const std::string text = std::string("net_param {") + net + R"(}
train_state { level: 3 }
test_state: { stage: 'test-on-train' }
test_iter: 5
test_state: { stage: 'test-on-test' }
test_iter: 7
test_interval: 10
base_lr: 0.1
display: 0
)";
  const SolverConfig config = parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
  EXPECT_EQ(config.test_iter, 5);
  ASSERT_EQ(config.notices.size(), 1u);
  EXPECT_CONTAINS(config.notices[0], "2 test nets");
  EXPECT_CONTAINS(config.notices[0], "stage test-on-train");
  // The TRAIN net's state shapes training: a resume must see it changed.
  std::string without = text;
  without.replace(without.find("train_state { level: 3 }"), 24, "");
  EXPECT_NE(config.fingerprint(),
            parse_solver_config(parse_config_text(without, "solver.prototxt"), "solver.prototxt").fingerprint());
  Solver s(config);
  const std::vector<std::string> train = layer_names(s.net());
  EXPECT_NE(std::find(train.begin(), train.end(), "deep"), train.end());
  ASSERT_NE(s.test_net(), nullptr);
  const std::vector<std::string> test = layer_names(*s.test_net());
  EXPECT_NE(std::find(test.begin(), test.end(), "on_train"), test.end());
  EXPECT_EQ(std::find(test.begin(), test.end(), "on_test"), test.end());
  EXPECT_EQ(std::find(test.begin(), test.end(), "deep"), test.end());
}

// ------------------------------------------------ automatic loss top ----

TEST(CaffeNets, LossLayerWithoutTopGetsOneAndItsLossCounts) {
  const char* text = R"(
layer { name: "in" type: "Input" top: "data" top: "label" input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" }
)";
  auto net = test::make_net(text);
  EXPECT_EQ(net->output_names(), (std::vector<std::string>{"loss"}));
  float* x = net->blob("data").data.data<float>();
  for (int i = 0; i < 12; ++i) x[i] = 0.1f * static_cast<float>(i) - 0.5f;
  float* y = net->blob("label").data.data<float>();
  for (int i = 0; i < 4; ++i) y[i] = static_cast<float>(i % 2);
  const float loss = net->forward();
  EXPECT_GT(loss, 0.0f);
  EXPECT_FLOAT_EQ(loss, net->blob("loss").data.data<float>()[0]);
  net->backward();
  const Blob& w = *net->params()[net->param_index("fc.weight")].blob;
  float g = 0;
  for (int64_t i = 0; i < w.numel(); ++i) g += std::abs(w.diff.data<float>()[i]);
  EXPECT_GT(g, 0.0f);

  // A layer that is not a loss still needs its top.
  EXPECT_CONTAINS(build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "r" type: "ReLU" bottom: "x" }
)"),
                  "top blobs, got 0");
}

// ------------------------------------------------ V1 upgrade ----

const char* kV2 = R"(name: "small"
input: "data"
input_shape { dim: 2 dim: 1 dim: 6 dim: 6 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool1" top: "fc" param { name: "shared_w" lr_mult: 0 }
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" include { phase: TEST } }
)";

const char* kV1 = R"(name: "small"
input: "data"
input_shape { dim: 2 dim: 1 dim: 6 dim: 6 }
layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
         blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
         convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "xavier" } } }
layers { name: "relu1" type: RELU bottom: "conv1" top: "conv1" }
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { name: "fc" type: INNER_PRODUCT bottom: "pool1" top: "fc" param: "shared_w" blobs_lr: 0
         inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.1 } } }
layers { name: "prob" type: SOFTMAX bottom: "fc" top: "prob" include { phase: TEST } }
)";

TEST(CaffeNets, V1FileGivesTheSameNetAsItsV2Spelling) {
  for (Phase phase : {Phase::kTrain, Phase::kTest}) {
    SCOPED_TRACE(phase_name(phase));
    testing::internal::CaptureStderr();
    auto v1 = test::make_net(kV1, phase, 7);
    const std::string notice = testing::internal::GetCapturedStderr();
    auto v2 = test::make_net(kV2, phase, 7);
    ASSERT_EQ(layer_names(*v1), layer_names(*v2));
    for (int i = 0; i < v1->num_layers(); ++i) EXPECT_EQ(v1->layer(i).type(), v2->layer(i).type());
    ASSERT_EQ(v1->params().size(), v2->params().size());
    for (size_t k = 0; k < v1->params().size(); ++k) {
      const NetParam &a = v1->params()[k], &b = v2->params()[k];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.lr_mult, b.lr_mult) << a.name;
      EXPECT_EQ(a.decay_mult, b.decay_mult) << a.name;
      EXPECT_EQ(test::values(a.blob->data), test::values(b.blob->data)) << a.name;
    }
    for (auto* net : {v1.get(), v2.get()}) {
      float* x = net->blob("data").data.data<float>();
      for (int i = 0; i < 72; ++i) x[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.4f;
      net->forward();
    }
    const std::string out = phase == Phase::kTest ? "prob" : "fc";
    EXPECT_EQ(test::values(v1->blob(out).data), test::values(v2->blob(out).data));
    // One notice per file and process: the TRAIN build printed it, the TEST build did not.
    if (phase == Phase::kTrain) {
      EXPECT_CONTAINS(notice, "net.prototxt: upgraded from Caffe's V1 format (5 `layers");
    } else {
      EXPECT_EQ(notice, "");
    }
  }
}

TEST(CaffeNets, V1DataParametersMoveToTransformParam) {
  const ConfigNode v1 = parse_config_text(R"(
layers { name: "data" type: DATA top: "data" top: "label"
         data_param { source: "train_lmdb" batch_size: 64 scale: 0.00390625 mirror: true crop_size: 227 }
         include: { phase: TRAIN } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "ip" bottom: "label" top: "loss" loss_weight: 2 }
)",
                                          "v1_data.prototxt");
  testing::internal::CaptureStderr();
  const ConfigNode up = upgrade_v1_net(v1);
  testing::internal::GetCapturedStderr();
  ASSERT_EQ(up.count("layer"), 2);
  const ConfigNode& data = *up.all("layer")[0];
  EXPECT_EQ(data.get_string("type"), "Data");
  EXPECT_EQ(data.block("data_param").get_int("batch_size"), 64);
  EXPECT_FALSE(data.block("data_param").has("scale"));
  EXPECT_DOUBLE_EQ(data.block("transform_param").get_double("scale"), 0.00390625);
  EXPECT_TRUE(data.block("transform_param").get_bool("mirror", false));
  EXPECT_EQ(data.block("transform_param").get_int("crop_size"), 227);
  EXPECT_EQ(data.block("include").get_string("phase"), "TRAIN");
  const ConfigNode& loss = *up.all("layer")[1];
  EXPECT_EQ(loss.get_string("type"), "SoftmaxWithLoss");
  EXPECT_DOUBLE_EQ(loss.get_double("loss_weight"), 2.0);
  // Every V1 type maps to a current one, and no two share it.
  std::vector<std::string> names;
  for (const auto& [v1_name, name] : v1_layer_types()) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const std::string& n : names) EXPECT_TRUE(is_caffe_layer_type(n)) << n;
}

// ------------------------------------------------ Pooling ceil_mode ----

TEST(CaffeNets, PoolingCeilModeIsTheForksSpellingOfRoundMode) {
  auto pooled = [](const std::string& param) {
    auto net = test::make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 6 dim: 6 } } }
layer { name: "p" type: "Pooling" bottom: "x" top: "y" pooling_param { pool: MAX kernel_size: 3 stride: 2 )" +
                              param + " } }");
    return net->blob("y").shape();
  };
  EXPECT_EQ(pooled(""), (Shape{1, 1, 3, 3}));  // Caffe's default: ceil
  EXPECT_EQ(pooled("ceil_mode: true"), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(pooled("ceil_mode: false"), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(pooled("ceil_mode: false round_mode: FLOOR"), (Shape{1, 1, 2, 2}));
  EXPECT_CONTAINS(error_of<ConfigError>([&] { pooled("ceil_mode: false round_mode: CEIL"); }),
                  "ceil_mode: false contradicts round_mode: CEIL");
}

// ------------------------------------------------ every problem at once ----

TEST(CaffeNetErrors, EveryUnknownKeyAndTypeOfANetInOneError) {
  const std::string e = build_error(R"(name: "many"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }
layer { name: "c1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_ouput: 2 kernel_size: 1 } }
layer { name: "spp" type: "SPP" bottom: "c1" top: "s" }
layer { name: "r" type: "ReLU" bottom: "c1" top: "r" relu_param { negative_slop: 0.1 } botom: "x" }
layer { name: "t" type: "Sigmoid" bottom: "x" top: "t" include { phase: TEST } sigmoid_parm { } }
)");
  EXPECT_CONTAINS(e, "net 'many' in net.prototxt has 5 problems:");
  EXPECT_CONTAINS(e, "1. unknown key 'num_ouput'");
  EXPECT_CONTAINS(e, "net.prototxt:3:");
  EXPECT_CONTAINS(e, "SPP is a Caffe layer type strata does not implement yet");
  EXPECT_CONTAINS(e, "unknown key 'negative_slop'");
  EXPECT_CONTAINS(e, "unknown key 'botom'");
  EXPECT_CONTAINS(e, "unknown key 'sigmoid_parm'");  // a layer of the other phase

  // One problem: its message as it always was.
  const std::string one = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" relu_param { negative_slop: 0.1 } }
)");
  EXPECT_EQ(one.rfind("unknown key 'negative_slop' in relu_param of layer 'r' at net.prototxt:3:", 0), 0u) << one;
}

TEST(CaffeNetErrors, ProblemsBeyondTheLimitAreCounted) {
  std::string text = "layer { name: \"in\" type: \"Input\" top: \"x\" input_param { shape { dim: 1 } } }\n";
  for (int i = 0; i < 25; ++i) {
    text += "layer { name: \"r" + std::to_string(i) + "\" type: \"ReLU\" bottom: \"x\" top: \"y" +
            std::to_string(i) + "\" colour: 1 }\n";
  }
  const std::string e = build_error(text);
  EXPECT_CONTAINS(e, "has 25 problems");
  EXPECT_CONTAINS(e, "20. unknown key 'colour'");
  EXPECT_EQ(e.find("21. "), std::string::npos);
  EXPECT_CONTAINS(e, "... and 5 more");
}

// Whether a Caffe type is implemented comes from the registry alone, so the
// message stays right as layers are added.
TEST(CaffeNetErrors, CaffeLayerTypesStrataLacksAreNamedAsSuch) {
  int lacking = 0;
  for (const std::string& type : caffe_layer_types()) {
    if (LayerRegistry::instance().has(type)) continue;
    ++lacking;
    const std::string e = error_of<ConfigError>([&] { LayerRegistry::instance().find(type); });
    if (type == "Data" || type == "HDF5Data" || type == "MemoryData" || type == "WindowData") continue;  // own hints
    EXPECT_CONTAINS(e, type + " is a Caffe layer type strata does not implement yet");
    EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  }
  EXPECT_GT(lacking, 0);  // Python, at least, stays unimplemented
  const std::string typo = error_of<ConfigError>([] { LayerRegistry::instance().find("Convolutoin"); });
  EXPECT_CONTAINS(typo, "did you mean 'Convolution'?");
}

TEST(CaffeNetErrors, UnknownSolverKeysAllAtOnce) {
  const std::string e = error_of<ConfigError>([] {
    parse_solver_config(parse_config_text("net: \"n\"\nbase_lr: 1\nmomentun: 0.9\nweight_decy: 1\n", "s.prototxt"),
                        "s.prototxt");
  });
  EXPECT_CONTAINS(e, "2 problems");
  EXPECT_CONTAINS(e, "'momentun'");
  EXPECT_CONTAINS(e, "'weight_decy'");
}

// ------------------------------------------------ solver paths ----

// Changes the working directory for one test.
class InDirectory {
 public:
  explicit InDirectory(const std::string& dir) : old_(working()) { EXPECT_EQ(::chdir(dir.c_str()), 0) << dir; }
  ~InDirectory() { (void)::chdir(old_.c_str()); }

 private:
  static std::string working() {
    char buf[4096];
    return ::getcwd(buf, sizeof buf) ? buf : ".";
  }
  std::string old_;
};

const char* kTinyNet = R"(name: "tiny"
layer { name: "in" type: "Input" top: "data" top: "label" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score" inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
)";

TEST(CaffeSolverPaths, WorkingDirectoryFirstAsCaffeThenBesideTheSolver) {
  TempDir root("strata_caffe_root");
  ASSERT_EQ(std::system(("mkdir -p '" + root.file("examples/mnist") + "' '" + root.file("elsewhere") + "'").c_str()), 0);
  write_text(root.file("examples/mnist/lenet_train_test.prototxt"), kTinyNet);
  write_text(root.file("examples/mnist/lenet_solver.prototxt"),
             "net: \"examples/mnist/lenet_train_test.prototxt\"\nbase_lr: 0.01\n"
             "snapshot_prefix: \"examples/mnist/lenet\"\nlog: \"examples/mnist/log.jsonl\"\n");
  {
    // Caffe's layout, run from its root: everything relative to the working directory.
    InDirectory in(root.path());
    const SolverConfig c = load_solver_config("examples/mnist/lenet_solver.prototxt");
    EXPECT_EQ(c.net, "examples/mnist/lenet_train_test.prototxt");
    EXPECT_EQ(c.snapshot_prefix, "examples/mnist/lenet");
    EXPECT_EQ(c.log, "examples/mnist/log.jsonl");
    EXPECT_TRUE(c.notices.empty());
    Solver s(c);
    EXPECT_EQ(s.net().name(), "tiny");
  }
  {
    // The same solver from elsewhere: found in neither place, both named.
    InDirectory in(root.file("elsewhere"));
    const SolverConfig c = load_solver_config(root.file("examples/mnist/lenet_solver.prototxt"));
    const std::string e = error_of<ConfigError>([&] { Solver s(c); });
    EXPECT_CONTAINS(e, "lenet_solver.prototxt:1:1: net 'examples/mnist/lenet_train_test.prototxt' not found; tried '" +
                           root.file("elsewhere/examples/mnist/lenet_train_test.prototxt") +
                           "' (the working directory, as Caffe looks) and '" +
                           root.file("examples/mnist/examples/mnist/lenet_train_test.prototxt") + "'");
  }
  // strata's own spelling (beside the solver) from anywhere, outputs beside it too.
  write_text(root.file("examples/mnist/own_solver.prototxt"),
             "net: \"lenet_train_test.prototxt\"\nbase_lr: 0.01\nsnapshot_prefix: \"snapshots/own\"\n");
  {
    InDirectory in(root.file("elsewhere"));
    const SolverConfig c = load_solver_config(root.file("examples/mnist/own_solver.prototxt"));
    EXPECT_EQ(c.net, root.file("examples/mnist/lenet_train_test.prototxt"));
    EXPECT_EQ(c.snapshot_prefix, root.file("examples/mnist/snapshots/own"));
    Solver s(c);
  }
  // A different file of the same name in the working directory wins, as in Caffe, with a note.
  write_text(root.file("elsewhere/lenet_train_test.prototxt"), std::string(kTinyNet) + "\n# another\n");
  {
    InDirectory in(root.file("elsewhere"));
    const SolverConfig c = load_solver_config(root.file("examples/mnist/own_solver.prototxt"));
    EXPECT_EQ(c.net, "lenet_train_test.prototxt");
    EXPECT_EQ(c.snapshot_prefix, "snapshots/own");
    ASSERT_EQ(c.notices.size(), 1u);
    EXPECT_CONTAINS(c.notices[0], "read from the working directory, as Caffe does");
    EXPECT_CONTAINS(c.notices[0], root.file("examples/mnist/lenet_train_test.prototxt"));
  }
}

// Solver files look in the working directory first (Caffe); data files named
// in a net beside the net first, so that a strata net's own relative paths
// keep their meaning wherever it runs.
TEST(CaffeSolverPaths, LookupOrderForSolverAndDataFiles) {
  TempDir root("strata_lookup");
  ASSERT_EQ(std::system(("mkdir -p '" + root.file("net") + "' '" + root.file("cwd") + "'").c_str()), 0);
  write_text(root.file("net/both.txt"), "beside");
  write_text(root.file("cwd/both.txt"), "working");
  write_text(root.file("net/beside_only.txt"), "beside");
  write_text(root.file("cwd/working_only.txt"), "working");
  InDirectory in(root.file("cwd"));
  const std::string net_dir = root.file("net");

  InputPath p = find_input_path("both.txt", net_dir);
  EXPECT_EQ(p.path, "both.txt");
  EXPECT_EQ(p.found, FoundIn::kWorkingDirectory);
  EXPECT_EQ(p.shadowed, net_dir + "/both.txt");
  p = find_input_path("both.txt", net_dir, LookFirst::kBesideFile);
  EXPECT_EQ(p.path, net_dir + "/both.txt");
  EXPECT_EQ(p.found, FoundIn::kBesideFile);
  EXPECT_EQ(p.shadowed, "both.txt");
  for (LookFirst first : {LookFirst::kWorkingDirectory, LookFirst::kBesideFile}) {
    EXPECT_EQ(find_input_path("beside_only.txt", net_dir, first).path, net_dir + "/beside_only.txt");
    EXPECT_EQ(find_input_path("working_only.txt", net_dir, first).path, "working_only.txt");
    p = find_input_path("nowhere.txt", net_dir, first);
    EXPECT_EQ(p.found, FoundIn::kNowhere);
    EXPECT_EQ(p.path, net_dir + "/nowhere.txt");
    EXPECT_EQ(find_input_path("/abs/x", net_dir, first).found, FoundIn::kAbsolute);
  }
  // One file seen from both places keeps the name beside the net.
  InDirectory in_net(net_dir);
  p = find_input_path("beside_only.txt", net_dir);
  EXPECT_EQ(p.path, net_dir + "/beside_only.txt");
  EXPECT_EQ(p.found, FoundIn::kBesideFile);
  EXPECT_EQ(p.shadowed, "");
  EXPECT_CONTAINS(input_path_places("nowhere.txt", net_dir),
                  "'" + root.file("net/nowhere.txt") + "' (the working directory, as Caffe looks) and '" + net_dir +
                      "/nowhere.txt' (beside the file that names it)");
}

}  // namespace
}  // namespace strata
