// The Winograd F(2x2, 3x3) transforms of every vector path this CPU runs
// (AVX2, AVX-512) give the same bits as the portable loops: on tile rows of
// 1 to 21 tiles (so every mix of 8-, 4- and one-tile steps), odd and even
// outputs, pads that widen and crop, several images and channels, and values
// whose sums round (so an addition in another order would show).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "framework/cpu/cpu_isa.h"
#include "framework/rng.h"
#include "layers/convolution/convolution_winograd.h"

namespace strata {
namespace {

using winograd::TileGrid;

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(-3.0f, 3.0f);
  return v;
}

// What one transform writes on the current path, given the same inputs.
struct Outputs {
  std::vector<float> v, y, dm;
};

struct Case {
  int64_t n, channels, height, width, pad;
};

Outputs run_transforms(const Case& c) {
  const int64_t out_h = c.height + 2 * c.pad - 2, out_w = c.width + 2 * c.pad - 2;
  const TileGrid grid = winograd::tile_grid(out_h, out_w);
  const int64_t T = c.n * grid.count();
  const int64_t image = c.channels * c.height * c.width;
  // Images a little apart (image_stride > one image), as inside a group.
  const int64_t stride = image + 5;
  const std::vector<float> x = random_values(c.n * stride, 1);
  const std::vector<float> m = random_values(winograd::kPoints * c.channels * T, 2);
  const int64_t out_image = c.channels * out_h * out_w + 3;
  const std::vector<float> dy = random_values(c.n * out_image, 3);
  std::vector<float> bias = random_values(c.channels, 4);
  std::vector<float> scratch(winograd::input_scratch_floats(grid), 0.0f);

  Outputs o;
  o.v.assign(winograd::kPoints * c.channels * T, -7.0f);
  winograd::transform_input(winograd::Planes{x.data(), c.n, stride, c.channels, c.height, c.width, c.pad, c.pad},
                            grid, o.v.data(), scratch.data());
  // Outputs with and without a bias; what lies between images stays untouched.
  o.y.assign(2 * c.n * out_image, -7.0f);
  winograd::transform_output(m.data(), c.channels, c.n, grid, out_h, out_w, bias.data(), o.y.data(), out_image);
  winograd::transform_output(m.data(), c.channels, c.n, grid, out_h, out_w, nullptr, o.y.data() + c.n * out_image,
                             out_image);
  o.dm.assign(winograd::kPoints * c.channels * T, -7.0f);
  winograd::transform_output_grad(dy.data(), c.channels, c.n, grid, out_h, out_w, out_image, o.dm.data());
  return o;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      FAIL() << what << ": element " << i << " is " << got[i] << ", the portable loops give " << want[i];
    }
  }
}

class WinogradTransforms : public ::testing::Test {
 protected:
  void TearDown() override {
    reset_cpu_isa_for_testing();
    winograd::force_kernels_for_testing(winograd::Kernels::kAuto);
  }
};

TEST_F(WinogradTransforms, EveryVectorPathGivesThePortableBits) {
  std::vector<Case> cases;
  for (int64_t w = 1; w <= 41; w += 2) cases.push_back({2, 3, 5, w, 1});  // 1 to 21 tiles a row, odd outputs
  for (int64_t w = 2; w <= 40; w += 6) cases.push_back({1, 2, 4, w, 1});  // even outputs
  cases.push_back({3, 2, 9, 17, 0});                                       // no pad
  cases.push_back({2, 2, 7, 33, 2});                                       // pad 2
  cases.push_back({2, 2, 6, 30, 3});                                       // pad beyond the kernel
  cases.push_back({2, 2, 12, 35, -1});                                     // a crop (the input gradient's pad)
  cases.push_back({1, 16, 8, 8, 1});                                       // cifar_vgg's last grid (4 tiles a row)
  cases.push_back({1, 4, 32, 32, 1});                                      // 16 tiles a row
  int compared = 0;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_supported(isa)) continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    for (const Case& c : cases) {
      const std::string where = "n " + std::to_string(c.n) + ", channels " + std::to_string(c.channels) + ", " +
                                std::to_string(c.height) + "x" + std::to_string(c.width) + ", pad " +
                                std::to_string(c.pad);
      force_cpu_isa_for_testing(isa);
      ASSERT_TRUE(winograd::vector_transforms());
      const Outputs got = run_transforms(c);
      winograd::force_kernels_for_testing(winograd::Kernels::kPortable);
      ASSERT_FALSE(winograd::vector_transforms());
      const Outputs want = run_transforms(c);
      winograd::force_kernels_for_testing(winograd::Kernels::kAuto);
      expect_same_bits(got.v, want.v, "transform_input, " + where);
      expect_same_bits(got.y, want.y, "transform_output, " + where);
      expect_same_bits(got.dm, want.dm, "transform_output_grad, " + where);
      ++compared;
    }
  }
  if (compared == 0) GTEST_SKIP() << "this CPU runs only the portable path: nothing to compare it with";
}

TEST_F(WinogradTransforms, PortablePathTakesNoVectorTransforms) {
  force_cpu_isa_for_testing(CpuIsa::kPortable);
  EXPECT_FALSE(winograd::vector_transforms());
}

}  // namespace
}  // namespace strata
