#include "transfer/position_embedding.h"

#include <cmath>
#include <cstring>

#include "framework/error.h"

namespace strata::transfer {

namespace {

// torch's cubic convolution kernel with A = -0.75 (upsample_bicubic2d).
constexpr double kA = -0.75;

double cubic_near(double x) { return ((kA + 2.0) * x - (kA + 3.0)) * x * x + 1.0; }      // |x| <= 1
double cubic_far(double x) { return ((kA * x - 5.0 * kA) * x + 8.0 * kA) * x - 4.0 * kA; }  // 1 < |x| < 2

// The four source indices and weights of one output coordinate, with
// align_corners=False (half-pixel centres) and indices clamped at the border.
struct Taps {
  int64_t index[4];
  double weight[4];
};

Taps taps_for(int64_t out_index, int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double real = scale * (static_cast<double>(out_index) + 0.5) - 0.5;
  const double base = std::floor(real);
  const double t = real - base;
  Taps taps;
  taps.weight[0] = cubic_far(t + 1.0);
  taps.weight[1] = cubic_near(t);
  taps.weight[2] = cubic_near(1.0 - t);
  taps.weight[3] = cubic_far(2.0 - t);
  for (int k = 0; k < 4; ++k) {
    int64_t i = static_cast<int64_t>(base) - 1 + k;
    taps.index[k] = i < 0 ? 0 : (i > in_size - 1 ? in_size - 1 : i);
  }
  return taps;
}

}  // namespace

int64_t square_grid_side(int64_t tokens) {
  if (tokens <= 0) return 0;
  int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  return side * side == tokens ? side : 0;
}

Tensor interpolate_position_embedding(const Tensor& pos, int64_t prefix, Grid from, Grid to) {
  const Shape& s = pos.shape();
  if (s.size() != 3 || s[0] != 1 || s[1] != prefix + from.h * from.w || from.h <= 0 || from.w <= 0 ||
      to.h <= 0 || to.w <= 0 || pos.dtype() != DType::kF32) {
    fail<ShapeError>("position embedding: expected f32 [1, ", prefix, " + ", from.h, "*", from.w,
                     ", D], got ", shape_str(s), " (resizing to a ", to.h, "x", to.w, " grid)");
  }
  const int64_t d = s[2];
  Tensor out({1, prefix + to.h * to.w, d});
  const float* src = pos.data<float>();
  float* dst = out.data<float>();
  if (prefix > 0) std::memcpy(dst, src, static_cast<size_t>(prefix * d) * sizeof(float));
  const float* grid = src + prefix * d;  // token (y, x) at grid + (y * from.w + x) * d
  float* out_grid = dst + prefix * d;
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t oy = 0; oy < to.h; ++oy) {
    const Taps ty = taps_for(oy, from.h, to.h);
    for (int64_t ox = 0; ox < to.w; ++ox) {
      const Taps tx = taps_for(ox, from.w, to.w);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int ky = 0; ky < 4; ++ky) {
        for (int kx = 0; kx < 4; ++kx) {
          const double wgt = ty.weight[ky] * tx.weight[kx];
          const float* row = grid + (ty.index[ky] * from.w + tx.index[kx]) * d;
          for (int64_t c = 0; c < d; ++c) acc[c] += wgt * row[c];
        }
      }
      float* o = out_grid + (oy * to.w + ox) * d;
      for (int64_t c = 0; c < d; ++c) o[c] = static_cast<float>(acc[c]);
    }
  }
  return out;
}

}  // namespace strata::transfer
