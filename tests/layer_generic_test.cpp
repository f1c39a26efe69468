// The generic layer test: every registered layer type, with every LayerExample
// of its schema(), is enrolled automatically and checked (framework/
// layer_check.h, the checks `strata check-layers` runs on any layer) for
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

#include <cctype>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "framework/layer_check.h"
#include "framework/layer_registry.h"

namespace strata {
namespace {

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

// One failure per problem the check found.
void expect_none(const std::vector<std::string>& problems) {
  for (const std::string& p : problems) ADD_FAILURE() << p;
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
  SCOPED_TRACE(describe_example(c.type, ex));
  expect_none(check_gradients(c.type, ex));
}

TEST_P(LayerGenericTest, ZeroBatch) {
  const GenericCase& c = GetParam();
  if (c.example < 0) GTEST_SKIP() << c.type << " has no examples (see Gradients)";
  const LayerExample ex = example();
  SCOPED_TRACE(describe_example(c.type, ex));
  expect_none(check_zero_batch(c.type, ex));
}

TEST_P(LayerGenericTest, ExtremeValues) {
  const GenericCase& c = GetParam();
  if (c.example < 0) GTEST_SKIP() << c.type << " has no examples (see Gradients)";
  const LayerExample ex = example();
  SCOPED_TRACE(describe_example(c.type, ex));
  expect_none(check_extreme_values(c.type, ex));
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerGenericTest, ::testing::ValuesIn(all_cases()), case_name);

// The checks can fail: a layer whose backward is wrong, one that adds to its
// bottom's gradient instead of writing it, and one that gives NaN for large
// inputs are each caught, and named.
class WrongGradientLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() {
    LayerSchema s;
    s.summary = "test only: y = 2x, backward says 3";
    s.examples = {layer_example("", {{2, 3}})};
    return s;
  }
  void setup(const BlobVec&, const BlobVec&) override {}
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    for (int64_t i = 0; i < bottom[0]->numel(); ++i) top[0]->data.data<float>()[i] = 2 * bottom[0]->data.data<float>()[i];
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    for (int64_t i = 0; i < bottom[0]->numel(); ++i) bottom[0]->diff.data<float>()[i] = 3 * top[0]->diff.data<float>()[i];
  }
};

class AccumulatingLayer : public WrongGradientLayer {
 public:
  using WrongGradientLayer::WrongGradientLayer;
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    for (int64_t i = 0; i < bottom[0]->numel(); ++i) bottom[0]->diff.data<float>()[i] += 2 * top[0]->diff.data<float>()[i];
  }
};

class OverflowingLayer : public WrongGradientLayer {
 public:
  using WrongGradientLayer::WrongGradientLayer;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    for (int64_t i = 0; i < bottom[0]->numel(); ++i) {
      const float x = bottom[0]->data.data<float>()[i];
      top[0]->data.data<float>()[i] = std::exp(x * x) / std::exp(x * x);  // inf / inf for |x| >= 10
    }
  }
  void backward_cpu(const BlobVec&, const std::vector<bool>&, const BlobVec& bottom) override { bottom[0]->diff.zero(); }
};

TEST(LayerChecks, CatchWrongGradientsAccumulationAndNaN) {
  {
    ScopedLayerRegistration reg(layer_registration<WrongGradientLayer>("TestOnlyWrongGradient"));
    const auto problems = check_gradients("TestOnlyWrongGradient", WrongGradientLayer::schema().examples[0]);
    ASSERT_FALSE(problems.empty());
    EXPECT_NE(problems[0].find("bottom 0 gradient element 0: analytic"), std::string::npos) << problems[0];
  }
  {
    ScopedLayerRegistration reg(layer_registration<AccumulatingLayer>("TestOnlyAccumulating"));
    const auto problems = check_gradients("TestOnlyAccumulating", AccumulatingLayer::schema().examples[0]);
    ASSERT_FALSE(problems.empty());  // NaN + 2 dy: the bottom's gradient started as NaN
    EXPECT_NE(problems[0].find("bottom 0 gradient element 0: analytic"), std::string::npos) << problems[0];
    EXPECT_NE(problems[0].find("nan"), std::string::npos) << problems[0];
  }
  {
    ScopedLayerRegistration reg(layer_registration<OverflowingLayer>("TestOnlyOverflowing"));
    const auto problems = check_extreme_values("TestOnlyOverflowing", OverflowingLayer::schema().examples[0]);
    ASSERT_FALSE(problems.empty());
    EXPECT_NE(problems[0].find("inputs scaled by 10000: top 0 has NaN"), std::string::npos) << problems[0];
  }
}

}  // namespace
}  // namespace strata
