// Caffe's fillers beyond the common ones: gaussian `sparse`,
// positive_unitball and bilinear, against their definitions in Caffe's
// filler.hpp; and their config errors.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/config/config.h"
#include "framework/filler.h"
#include "framework/rng.h"
#include "tests/config_test_util.h"

namespace strata {
namespace {

FillerSpec spec_of(const std::string& text) {
  const ConfigNode root = parse_config_text("f { " + text + " }", "filler.prototxt");
  return parse_filler(root.block("f"), FillerSpec{}, "weight_filler");
}

TEST(CaffeFillers, SparseGaussianKeepsAboutSparseOfEachColumn) {
  Tensor t(Shape{100, 400});
  Rng rng(7);
  fill(spec_of("type: 'gaussian' std: 1 sparse: 15"), t, rng);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < t.numel(); ++i) nonzero += t.data<float>()[i] != 0.0f;
  // keep probability 15/100: 6000 of 40000 expected, sd ~71.
  EXPECT_NEAR(static_cast<double>(nonzero), 6000.0, 400.0);
}

TEST(CaffeFillers, PositiveUnitballRowsSumToOne) {
  Tensor t(Shape{3, 5});
  Rng rng(1);
  fill(spec_of("type: 'positive_unitball'"), t, rng);
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int k = 0; k < 5; ++k) {
      EXPECT_GE(t.data<float>()[r * 5 + k], 0.0f);
      sum += t.data<float>()[r * 5 + k];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(CaffeFillers, BilinearIsCaffesUpsamplingKernel) {
  // k = 4 (stride-2 upsampling): f = 2, c = 0.375 -> 1-D weights 0.25 0.75 0.75 0.25.
  Tensor t(Shape{2, 1, 4, 4});
  Rng rng(1);
  fill(spec_of("type: 'bilinear'"), t, rng);
  const float w[4] = {0.25f, 0.75f, 0.75f, 0.25f};
  for (int ch = 0; ch < 2; ++ch) {
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 4; ++x) EXPECT_FLOAT_EQ(t.data<float>()[ch * 16 + y * 4 + x], w[y] * w[x]);
    }
  }
  Tensor flat(Shape{4, 4});
  EXPECT_THROW(fill(spec_of("type: 'bilinear'"), flat, rng), ConfigError);
}

TEST(CaffeFillers, SparseOnlyForGaussian) {
  EXPECT_THROW(spec_of("type: 'xavier' sparse: 3"), ConfigError);
}

}  // namespace
}  // namespace strata
