// The generic layer test: every registered layer type, with every LayerExample
// of its schema(), is enrolled automatically and checked for
//   Gradients:     analytic bottom and parameter gradients against central
//                  finite differences of J = sum_k sum_i w_ki * top_k[i]
//                  (w random, or the loss weight for loss tops), accumulated
//                  in double, compared as Caffe's GradientChecker does:
//                  |a - n| <= tolerance * max(|a|, |n|, 1). It also checks the
//                  gradient contract: bottom diffs are overwritten (they start
//                  as NaN) and parameter diffs accumulated (they start random).
//   ZeroBatch:     bottoms with first dim 0 run forward and backward, both from
//                  setup and after a normal batch, giving zero-batch tops (or,
//                  for tops that do not follow the batch such as a loss, tops
//                  without NaN).
//   ExtremeValues: inputs scaled by 1e4, -1e4 and 1e-30 give no NaN in tops or
//                  gradients.
// A type without examples fails unless its schema declares it a data layer
// (LayerKind::kData; tests/layer_kind_test.cpp checks that such a layer has
// no bottoms) or an output layer (LayerKind::kOutput: no tops).
// Kinks: see fill_inputs() in layer_test_util.h; Gaussian inputs stay two
// steps apart from each other and from 0.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "tests/layer_test_util.h"

namespace strata {
namespace {

using test_util::LayerHarness;

constexpr uint64_t kSeed = 20240601;

struct GenericCase {
  std::string type;
  int example = -1;  // -1: the type has no examples
};

// For gtest's messages.
void PrintTo(const GenericCase& c, std::ostream* os) {
  *os << c.type << " example " << c.example;
}

std::vector<GenericCase> all_cases() {
  std::vector<GenericCase> cases;
  const LayerRegistry& reg = LayerRegistry::instance();
  for (const std::string& type : reg.types()) {
    const LayerSchema schema = reg.find(type).schema();
    if (schema.examples.empty()) cases.push_back({type, -1});
    for (size_t i = 0; i < schema.examples.size(); ++i) cases.push_back({type, static_cast<int>(i)});
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<GenericCase>& info) {
  std::string name = info.param.type + "_" + (info.param.example < 0 ? std::string("NoExample")
                                                                      : std::to_string(info.param.example));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

std::string describe(const std::string& type, const LayerExample& ex) {
  std::ostringstream os;
  os << type << " example {" << ex.config << "} bottoms";
  for (const Shape& s : ex.bottom_shapes) os << " " << shape_str(s);
  os << " phase " << phase_name(ex.phase);
  return os.str();
}

int64_t first_nan(const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (std::isnan(p[i])) return i;
  }
  return -1;
}

// Which bottoms get a gradient: those the layer can backward to, never labels.
std::vector<bool> gradient_targets(const LayerHarness& h, const LayerExample& ex) {
  std::vector<bool> pd = h.backward_targets();
  for (size_t i = 0; i < pd.size(); ++i) {
    if (test_util::input_kind(ex, i) == InputKind::kLabels) pd[i] = false;
  }
  return pd;
}

// Per-top objective weights: the loss weight for loss tops, else N(0, 1).
std::vector<std::vector<float>> top_weights(const LayerHarness& h, Rng& rng) {
  std::vector<std::vector<float>> w(h.top.size());
  for (size_t k = 0; k < h.top.size(); ++k) {
    const float lw = h.layer->default_loss_weight(static_cast<int>(k));
    w[k].resize(static_cast<size_t>(h.top[k]->numel()));
    for (float& v : w[k]) v = lw != 0.0f ? lw : rng.gaussian(0.0f, 1.0f);
  }
  return w;
}

void set_top_diffs(LayerHarness& h, const std::vector<std::vector<float>>& w) {
  for (size_t k = 0; k < h.top.size(); ++k) {
    h.top[k]->diff.resize(h.top[k]->shape());
    test_util::copy_into(h.top[k]->diff, w[k]);
  }
}

// J for the current inputs; the layer's RNG is rewound first so that
// stochastic layers draw the same numbers on every evaluation.
double objective(LayerHarness& h, const std::string& state, const std::vector<std::vector<float>>& w) {
  h.layer->load_state(state);
  h.forward();
  double j = 0.0;
  for (size_t k = 0; k < h.top.size(); ++k) {
    const float* y = h.top[k]->data.data<float>();
    if (static_cast<size_t>(h.top[k]->numel()) != w[k].size()) {
      ADD_FAILURE() << "top " << k << " changed size between forwards";
      return 0.0;
    }
    for (size_t i = 0; i < w[k].size(); ++i) j += static_cast<double>(w[k][i]) * y[i];
  }
  return j;
}

// Compares analytic with numeric gradients of one blob; reports the first few
// mismatches.
void compare(const std::string& what, const std::vector<float>& analytic, const std::vector<double>& numeric,
             float tolerance) {
  int reported = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i];
    const double n = numeric[i];
    const double scale = std::max({std::fabs(a), std::fabs(n), 1.0});
    if (!(std::fabs(a - n) <= tolerance * scale)) {
      if (reported++ < 5) {
        ADD_FAILURE() << what << " element " << i << ": analytic " << a << " vs numeric " << n
                      << " (tolerance " << tolerance << " x " << scale << ")";
      }
    }
  }
  if (reported > 5) ADD_FAILURE() << what << ": " << reported << " mismatches in all";
}

// Central differences of J with respect to every element of `data`.
std::vector<double> numeric_gradient(LayerHarness& h, Tensor& data, const std::string& state,
                                     const std::vector<std::vector<float>>& w, float step) {
  std::vector<double> g(static_cast<size_t>(data.numel()));
  float* p = data.data<float>();
  for (int64_t i = 0; i < data.numel(); ++i) {
    const float v = p[i];
    p[i] = v + step;
    const double plus = objective(h, state, w);
    p[i] = v - step;
    const double minus = objective(h, state, w);
    p[i] = v;
    // The actual float distance between the two points, not 2 * step.
    g[static_cast<size_t>(i)] = (plus - minus) / (static_cast<double>(v + step) - static_cast<double>(v - step));
  }
  return g;
}

class LayerGenericTest : public ::testing::TestWithParam<GenericCase> {
 protected:
  LayerExample example() const {
    return LayerRegistry::instance().find(GetParam().type).schema().examples.at(
        static_cast<size_t>(GetParam().example));
  }
};

TEST_P(LayerGenericTest, Gradients) {
  const GenericCase& c = GetParam();
  if (c.example < 0) {
    // Only data and output layers may go without examples.
    const LayerKind kind = LayerRegistry::instance().find(c.type).schema().kind;
    if (kind == LayerKind::kData || kind == LayerKind::kOutput) {
      GTEST_SKIP() << c.type << " is a " << layer_kind_name(kind) << " layer; tested elsewhere";
    }
    FAIL() << "layer type " << c.type << " has no LayerExample; add one to its schema() (only a data layer, "
           << "whose schema says kind = LayerKind::kData, may go without)";
  }
  const LayerExample ex = example();
  SCOPED_TRACE(describe(c.type, ex));
  LayerHarness h = test_util::make_harness(c.type, ex, kSeed);
  h.setup();
  const std::string state = h.layer->save_state();
  h.layer->load_state(state);
  h.forward();
  Rng rng(kSeed + 1);
  const std::vector<std::vector<float>> w = top_weights(h, rng);

  // Analytic gradients. NaN-filled bottom diffs catch a layer that adds to
  // them or skips elements; random parameter diffs check accumulation.
  const std::vector<bool> pd = gradient_targets(h, ex);
  set_top_diffs(h, w);
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    h.bottom[i]->diff.resize(h.bottom[i]->shape());
    if (pd[i]) h.bottom[i]->diff.fill(std::nanf(""));
  }
  std::vector<LayerParam>& params = h.layer->params();
  std::vector<std::vector<float>> offsets(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    Tensor& d = params[p].blob->diff;
    test_util::fill_gaussian(d, rng);
    offsets[p] = test_util::to_vector(d);
  }
  h.backward(pd);
  std::vector<std::vector<float>> bottom_grads(h.bottom.size());
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    if (pd[i]) bottom_grads[i] = test_util::to_vector(h.bottom[i]->diff);
  }
  std::vector<std::vector<float>> param_grads(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    param_grads[p] = test_util::to_vector(params[p].blob->diff);
    for (size_t i = 0; i < param_grads[p].size(); ++i) param_grads[p][i] -= offsets[p][i];
  }

  // Numeric gradients.
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    if (!pd[i]) continue;
    const std::vector<double> n = numeric_gradient(h, h.bottom[i]->data, state, w, ex.step);
    compare("bottom " + std::to_string(i) + " gradient", bottom_grads[i], n, ex.tolerance);
  }
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].learnable != Learnable::kYes) continue;
    const std::vector<double> n = numeric_gradient(h, params[p].blob->data, state, w, ex.step);
    compare("param '" + params[p].name + "' gradient", param_grads[p], n, ex.tolerance);
  }
}

// Tops after a zero-batch forward: batch 0, or (for outputs that do not
// follow the batch: a loss, per-class accuracy) free of NaN.
void expect_zero_batch_tops(const LayerHarness& h) {
  for (size_t k = 0; k < h.top.size(); ++k) {
    const Tensor& t = h.top[k]->data;
    if (t.ndim() >= 1 && t.dim(0) == 0) continue;
    EXPECT_EQ(first_nan(t), -1) << "top " << k << " " << shape_str(t.shape())
                                << " has NaN for a zero batch (first index shown)";
  }
}

void run_zero_batch_backward(LayerHarness& h, const LayerExample& ex) {
  Rng rng(kSeed + 2);
  set_top_diffs(h, top_weights(h, rng));
  const std::vector<bool> pd = gradient_targets(h, ex);
  for (size_t i = 0; i < h.bottom.size(); ++i) h.bottom[i]->diff.resize(h.bottom[i]->shape());
  h.backward(pd);
  for (const LayerParam& p : h.layer->params()) {
    EXPECT_EQ(first_nan(p.blob->diff), -1) << "param '" << p.name << "' gradient has NaN after a zero batch";
  }
}

std::vector<Shape> zero_batch(const std::vector<Shape>& shapes) {
  std::vector<Shape> out = shapes;
  for (Shape& s : out) {
    if (!s.empty()) s[0] = 0;
  }
  return out;
}

TEST_P(LayerGenericTest, ZeroBatch) {
  const GenericCase& c = GetParam();
  if (c.example < 0) GTEST_SKIP() << c.type << " has no examples (see Gradients)";
  const LayerExample ex = example();
  SCOPED_TRACE(describe(c.type, ex));
  const std::vector<Shape> shapes = zero_batch(ex.bottom_shapes);
  {
    SCOPED_TRACE("set up with a zero batch");
    LayerHarness h = test_util::make_harness(c.type, ex.config, shapes, ex.phase, kSeed);
    h.setup();
    h.forward();
    expect_zero_batch_tops(h);
    run_zero_batch_backward(h, ex);
  }
  {
    SCOPED_TRACE("zero batch after a full one");
    LayerHarness h = test_util::make_harness(c.type, ex, kSeed);
    h.setup();
    h.forward();
    for (size_t i = 0; i < h.bottom.size(); ++i) h.bottom[i]->resize(shapes[i]);
    h.forward();
    expect_zero_batch_tops(h);
    run_zero_batch_backward(h, ex);
  }
}

TEST_P(LayerGenericTest, ExtremeValues) {
  const GenericCase& c = GetParam();
  if (c.example < 0) GTEST_SKIP() << c.type << " has no examples (see Gradients)";
  const LayerExample ex = example();
  SCOPED_TRACE(describe(c.type, ex));
  for (const float scale : {1e4f, -1e4f, 1e-30f}) {
    SCOPED_TRACE("inputs scaled by " + std::to_string(scale));
    LayerHarness h = test_util::make_harness(c.type, ex, kSeed);
    for (size_t i = 0; i < h.bottom.size(); ++i) {
      const InputKind kind = test_util::input_kind(ex, i);
      if (kind == InputKind::kLabels) continue;
      const float s = kind == InputKind::kPositive ? std::fabs(scale) : scale;
      float* p = h.bottom[i]->data.data<float>();
      for (int64_t j = 0; j < h.bottom[i]->numel(); ++j) p[j] *= s;
    }
    h.setup();
    h.forward();
    for (size_t k = 0; k < h.top.size(); ++k) {
      EXPECT_EQ(first_nan(h.top[k]->data), -1) << "top " << k << " has NaN (first index shown)";
    }
    Rng rng(kSeed + 3);
    set_top_diffs(h, top_weights(h, rng));
    const std::vector<bool> pd = gradient_targets(h, ex);
    for (size_t i = 0; i < h.bottom.size(); ++i) h.bottom[i]->diff.resize(h.bottom[i]->shape());
    h.backward(pd);
    for (size_t i = 0; i < h.bottom.size(); ++i) {
      if (pd[i]) {
        EXPECT_EQ(first_nan(h.bottom[i]->diff), -1) << "bottom " << i << " gradient has NaN";
      }
    }
    for (const LayerParam& p : h.layer->params()) {
      EXPECT_EQ(first_nan(p.blob->diff), -1) << "param '" << p.name << "' gradient has NaN";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerGenericTest, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace strata
