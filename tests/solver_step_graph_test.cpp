// Step graphs (framework/solver/step_graph.h). On the CPU there are no
// graphs, but `step_graph: ON` runs the step split as a graph replays it:
// the sources' forward, the pass, the update from the ledger's fixed record
// with the learning rate read from it. These tests check that split step
// against the eager one bit for bit, and the reasons a step is not captured.
// The GPU test at the end captures and replays.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/solver/solver.h"
#include "framework/solver/step_graph.h"
#include "tests/solver_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using solver_test::all_weights;
using solver_test::parse_solver;
using solver_test::TempDir;

// A batch drawn anew each step by the source (DummyData), Dropout's masks,
// a ReLU fused into the layer before it, a loss that checks its labels, and
// an accuracy: every kind of host work a replay must keep.
const char* kNet = R"(
  name: "graphable"
  layer { name: "data" type: "DummyData" top: "data" top: "label"
          dummy_data_param { shape { dim: 8 dim: 5 } shape { dim: 8 }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
  layer { name: "fc1" type: "InnerProduct" bottom: "data" top: "hidden"
          inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.4 } } }
  layer { name: "relu" type: "ReLU" bottom: "hidden" top: "hidden" }
  layer { name: "drop" type: "Dropout" bottom: "hidden" top: "hidden" dropout_param { dropout_ratio: 0.3 } }
  layer { name: "fc2" type: "InnerProduct" bottom: "hidden" top: "score"
          inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.4 } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
  layer { name: "acc" type: "Accuracy" bottom: "score" bottom: "label" top: "accuracy" }
)";

std::string solver_text(const std::string& extra) {
  return std::string("net_param {") + kNet +
         "}\nbase_lr: 0.05 lr_policy: \"step\" gamma: 0.5 stepsize: 3 display: 0 snapshot_after_train: false "
         "random_seed: 7 " +
         extra;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    ASSERT_EQ(x, y) << "weight " << i << ": " << a[i] << " vs " << b[i];
  }
}

struct TrainedRun {
  std::vector<float> w;
  int64_t steps = 0;
  bool graph = false;
  float loss = 0.0f;
};

TrainedRun train(const std::string& extra, const SolverOptions& options = {}) {
  TempDir dir;
  Solver solver(parse_solver(solver_text(extra), dir.file("s.prototxt")), options);
  TrainedRun r;
  r.graph = solver.uses_step_graph();
  solver.solve();
  Net& net = solver.net();
  r.w = all_weights(net);
  r.steps = solver.optimizer().steps();
  r.loss = solver.smoothed_loss();
  return r;
}

TEST(StepGraph, TheSplitStepTrainsTheEagerWeights) {
  for (const char* rule : {"type: \"SGD\" momentum: 0.9 weight_decay: 0.01", "type: \"Adam\" clip_gradients: 0.2"}) {
    for (const char* more : {"", "iter_size: 2"}) {
      SCOPED_TRACE(std::string(rule) + " " + more);
      const std::string extra = std::string("max_iter: 8 ") + rule + " " + more;
      const TrainedRun eager = train(extra + " step_results: EACH_STEP step_graph: OFF");
      const TrainedRun split = train(extra + " step_results: ONE_STEP_LATER step_graph: ON");
      EXPECT_FALSE(eager.graph);
      EXPECT_TRUE(split.graph);
      expect_same_bits(split.w, eager.w);
      EXPECT_EQ(split.steps, 8);
      EXPECT_EQ(eager.steps, 8);
      EXPECT_GT(eager.loss, 0.0f);
    }
  }
}

TEST(StepGraph, AutoLeavesTheCpuStepAsItIs) {
  TempDir dir;
  Solver solver(parse_solver(solver_text("max_iter: 1 step_results: ONE_STEP_LATER"), dir.file("s.prototxt")));
  EXPECT_TRUE(solver.results_one_step_later());
  EXPECT_FALSE(solver.uses_step_graph());
  EXPECT_EQ(solver.step_graph_obstacle(), "");
  EXPECT_FALSE(solver.step_graph_captured());
}

TEST(StepGraph, SaysWhyAStepCannotBeCaptured) {
  TempDir dir;
  // Results read every step: a captured step must not wait for the device.
  {
    Solver s(parse_solver(solver_text("max_iter: 1 step_results: EACH_STEP"), dir.file("a.prototxt")));
    EXPECT_CONTAINS(s.step_graph_obstacle(), "read every step");
    EXPECT_FALSE(s.uses_step_graph());
    const std::string err = test::error_of<ConfigError>([&] {
      Solver on(parse_solver(solver_text("max_iter: 1 step_results: EACH_STEP step_graph: ON"), dir.file("b.prototxt")));
      on.solve();
    });
    EXPECT_CONTAINS(err, "step_graph: ON, but the step cannot be captured");
    EXPECT_CONTAINS(err, "step_graph: AUTO");
  }
  // A layer after the sources that does not say it replays: a source in the middle of the net.
  {
    const std::string net = R"(
      layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score" inner_product_param { num_output: 2 } }
      layer { name: "labels" type: "DummyData" top: "label" dummy_data_param { shape { dim: 4 } } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" })";
    Solver s(parse_solver("net_param {" + net + "} base_lr: 0.1 max_iter: 1 step_results: ONE_STEP_LATER",
                          dir.file("c.prototxt")));
    EXPECT_EQ(StepGraph::sources(s.net()), 1);
    EXPECT_CONTAINS(s.step_graph_obstacle(), "layer 'labels' (DummyData) does not say");
    EXPECT_CONTAINS(s.step_graph_obstacle(), "replays_in_a_graph");
  }
  // Hooks around the layers run on the host: a replay would skip them.
  {
    Solver s(parse_solver(solver_text("max_iter: 1 step_results: ONE_STEP_LATER"), dir.file("e.prototxt")));
    Net::LayerPassHooks hooks;
    hooks.after_forward = [](int) {};
    s.net().set_layer_pass_hooks(hooks);
    EXPECT_CONTAINS(s.step_graph_obstacle(), "layer pass hooks are set");
  }
  // The net of the first test passes: every layer after its source replays.
  Solver ok(parse_solver(solver_text("max_iter: 1 step_results: ONE_STEP_LATER"), dir.file("d.prototxt")));
  EXPECT_EQ(StepGraph::net_obstacle(ok.net()), "");
  EXPECT_EQ(StepGraph::sources(ok.net()), 1);
}

// A replay keeps the shapes it was captured with: a batch of another shape
// ends the graph's steps (ON: with an error naming the layer and both shapes).
TEST(StepGraph, ABatchOfAnotherShapeEndsTheCapturedSteps) {
  TempDir dir;
  const std::string net = R"(
    layer { name: "in" type: "Input" top: "data" top: "label" input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
    layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score" inner_product_param { num_output: 2 } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" })";
  Solver s(parse_solver("net_param {" + net + "} base_lr: 0.1 max_iter: 10 step_results: ONE_STEP_LATER step_graph: ON",
                        dir.file("s.prototxt")));
  s.step();
  s.step();
  s.net().blob("data").resize({2, 3});
  s.net().blob("label").resize({2});
  const std::string err = test::error_of<Error>([&] { s.step(); });
  EXPECT_CONTAINS(err, "the batch of layer 'in' changed shape to [2, 3] from [4, 3]");
  EXPECT_CONTAINS(err, "at iteration 3");
  EXPECT_FALSE(s.uses_step_graph());  // the run goes on eagerly
  EXPECT_CONTAINS(s.step_graph_obstacle(), "changed shape");
}

#ifdef STRATA_WITH_CUDA
// The capture itself: the work runs once, into a graph; a replay reads what
// its inputs hold at launch; a capture that CUDA refuses (a copy the host
// waits for) runs the work eagerly, says why, and stops capturing.
TEST(CudaStepGraph, ACaptureReplaysAndARefusedOneRunsEagerly) {
  STRATA_SKIP_WITHOUT_GPU("step graphs are compile-tested only");
  const Device gpu = Device::cuda(0);
  Tensor src({1000}, DType::kF32, gpu), dst({1000}, DType::kF32, gpu);
  src.fill(1.0f);
  StepGraph graph(gpu);
  int ran = 0, before = 0;
  const auto work = [&] {
    ++ran;
    dst.copy_from(src);
  };
  graph.run(StepGraph::kPass, work, [&] { ++before; });  // not enabled: eager
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(before, 0);
  graph.enable();
  src.fill(2.0f);
  graph.run(StepGraph::kPass, work, [&] { ++before; });  // captured, then launched
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(before, 1);
  EXPECT_EQ(test::values(dst.to(Device::cpu()))[999], 2.0f);
  src.fill(3.0f);
  graph.run(StepGraph::kPass, work, [&] { ++before; });  // replayed: the work's host code does not run
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(before, 2);
  EXPECT_EQ(test::values(dst.to(Device::cpu()))[999], 3.0f);

  StepGraph refused(gpu);
  refused.enable();
  int tries = 0;
  float seen = 0.0f;
  try {
    refused.run(StepGraph::kUpdate, [&] {
      ++tries;
      seen = test::values(src.to(Device::cpu()))[0];  // the host waits for the device: not capturable
    }, nullptr);
    ADD_FAILURE() << "a capture that waits for the device was accepted";
  } catch (const StepGraph::Failed& f) {
    EXPECT_FALSE(f.why.empty());
  }
  EXPECT_EQ(tries, 2);  // tried in the capture, then run eagerly
  EXPECT_EQ(seen, 3.0f);
  EXPECT_FALSE(refused.enabled());
  EXPECT_FALSE(refused.captured());
}

// The captured step on a GPU: the same weights as the eager GPU step, bit for
// bit, in every precision, and it must really replay.
TEST(CudaStepGraph, CapturedStepsTrainTheEagerWeights) {
  STRATA_SKIP_WITHOUT_GPU("step graphs are compile-tested only");
  SolverOptions gpu;
  gpu.device = Device::cuda(0);
  for (const char* precision : {"FP32", "BF16", "FP16"}) {
    for (const char* more : {"type: \"SGD\" momentum: 0.9", "type: \"Adam\" iter_size: 2 clip_gradients: 0.2"}) {
      SCOPED_TRACE(std::string(precision) + " " + more);
      const std::string extra = std::string("max_iter: 7 precision: ") + precision + " " + more +
                                " step_results: ONE_STEP_LATER step_graph: ";
      TempDir dir;
      Solver eager(parse_solver(solver_text(extra + "OFF"), dir.file("a.prototxt")), gpu);
      Solver graph(parse_solver(solver_text(extra + "ON"), dir.file("b.prototxt")), gpu);
      eager.solve();
      graph.solve();
      EXPECT_TRUE(graph.step_graph_captured()) << graph.step_graph_obstacle();
      EXPECT_EQ(graph.step_graph_obstacle(), "");
      for (size_t i = 0; i < eager.net().params().size(); ++i) {
        expect_same_bits(test::values(graph.net().params()[i].blob->data.to(Device::cpu())),
                         test::values(eager.net().params()[i].blob->data.to(Device::cpu())));
      }
      EXPECT_EQ(graph.optimizer().steps(), eager.optimizer().steps());
      EXPECT_EQ(graph.smoothed_loss(), eager.smoothed_loss());
    }
  }
}
#endif

}  // namespace
}  // namespace strata
