// Training a small solver to the end, for tests that compare two ways of
// running the same steps (memory layouts, recomputation): the losses of every
// step and the weights at the end.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"

namespace strata::test {

// A small solver over a small convolutional net (DummyData 8 x 1 x 12 x 12,
// five classes: conv1, relu1, pool1, ip1, relu2, dropout, ip2, softmax loss,
// accuracy), Adam for 4 steps, with `blob_memory: memory`. `ip1` replaces
// the ip1 layer (its top must be "ip1"), `net_extra` goes at the end of the
// net (recompute blocks), `solver_extra` at the end of the solver.
inline SolverConfig small_conv_solver(const std::string& memory, const std::string& ip1 = "",
                                      const std::string& net_extra = "", const std::string& solver_extra = "") {
  const std::string text = R"(
net_param {
  layer { name: "data" type: "DummyData" top: "data" top: "label"
          dummy_data_param { shape { dim: 8 dim: 1 dim: 12 dim: 12 } shape { dim: 8 }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 3 } } }
  layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
          convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
  layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
  layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
)" + (ip1.empty() ? std::string(R"(
  layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1" inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
)") : ip1) + R"(
  layer { name: "relu2" type: "ReLU" bottom: "ip1" top: "ip1" }
  layer { name: "drop" type: "Dropout" bottom: "ip1" top: "ip1" dropout_param { dropout_ratio: 0.3 } }
  layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
  layer { name: "acc" type: "Accuracy" bottom: "ip2" bottom: "label" top: "acc" }
)" + net_extra + R"(
}
type: "Adam" base_lr: 0.01 max_iter: 4 display: 0 snapshot: 0 snapshot_after_train: false random_seed: 9
blob_memory: )" + memory + "\n" + solver_extra + "\n";
  return parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
}

// Runs `config` to max_iter; appends each step's loss to `losses` and
// returns every parameter's values at the end.
inline std::vector<std::vector<float>> train_to_end(const SolverConfig& config, std::vector<float>* losses) {
  Solver solver(config);
  while (solver.iter() < config.max_iter) losses->push_back(solver.step());
  std::vector<std::vector<float>> w;
  for (const NetParam& p : solver.net().params()) w.push_back(values(p.blob->data));
  return w;
}

// Trains config_for("SEPARATE"), config_for("BY_LIFETIME") and
// config_for("BY_LIFETIME_CHECKED") and expects the same weights and losses
// from all three: the memory layout must not change a bit.
template <typename ConfigFor>
void expect_layouts_train_alike(const ConfigFor& config_for) {
  std::vector<float> loss_separate, loss_planned, loss_checked;
  const auto separate = train_to_end(config_for("SEPARATE"), &loss_separate);
  const auto planned = train_to_end(config_for("BY_LIFETIME"), &loss_planned);
  const auto checked = train_to_end(config_for("BY_LIFETIME_CHECKED"), &loss_checked);
  EXPECT_EQ(planned, separate);
  EXPECT_EQ(checked, separate);
  EXPECT_EQ(loss_planned, loss_separate);
  EXPECT_EQ(loss_checked, loss_separate);
  for (float l : loss_separate) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace strata::test
