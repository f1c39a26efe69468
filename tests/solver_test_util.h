// Helpers shared by solver_config_test.cpp and solver_test.cpp.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/net.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"

namespace strata {
namespace solver_test {

using test::error_of;
using test::write_text;

// A temp folder named strata_solver_test_*.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("strata_solver_test") {}
};

inline SolverConfig parse_solver(const std::string& text, const std::string& source = "/work/exp/solver.prototxt") {
  return parse_solver_config(parse_config_text(text, source), source);
}

// A 4 -> 3 linear classifier on a fixed batch set through an Input layer.
inline const char* kLinearNet = R"(
  name: "linear"
  layer { name: "input" type: "Input" top: "data" top: "label"
          input_param { shape { dim: 6 dim: 4 } shape { dim: 6 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score"
          inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
)";

inline std::string linear_solver(const std::string& extra) {
  return std::string("net_param {") + kLinearNet + "}\nbase_lr: 0.1\n" + extra;
}

inline void fill_inputs(Net& net) {
  float* x = net.blob("data").data.data<float>();
  for (int i = 0; i < 24; ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  float* y = net.blob("label").data.data<float>();
  for (int i = 0; i < 6; ++i) y[i] = static_cast<float>(i % 3);
}

// Every parameter's values, in order, on the host.
inline std::vector<float> all_weights(Net& net) {
  std::vector<float> out;
  for (const NetParam& p : net.params()) {
    const float* d = p.blob->data.data<float>();
    out.insert(out.end(), d, d + p.blob->numel());
  }
  return out;
}

}  // namespace solver_test
}  // namespace strata
