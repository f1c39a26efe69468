// ArgMax (Caffe "ArgMax"): the indices (and optionally the values) of the
// top_k largest elements, per item or along an axis, as Caffe defines it:
// - without axis: each item's count(1) values; top [N, 1, top_k, 1...]
//   (at least 3 axes) holding the indices, or [N, 2, top_k, ...] with
//   out_max_val: the indices, then the values.
// - with axis: along that axis; the top is the bottom's shape with top_k on
//   the axis, holding the indices, or the values with out_max_val.
// Order: larger values first; equal values rank the larger index first
// (Caffe sorts (value, index) pairs descending); NaN ranks above every
// number. No gradient: the indices are not differentiable.
//
// The selection below is shared by argmax.cpp and argmax.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

struct ArgMaxGeometry {
  int64_t dim;        // values per row
  int64_t axis_dist;  // stride between a row's values (1 without axis)
  int64_t top_k;
  int out_max_val;
  int has_axis;

  // Does (va, ia) rank before (vb, ib)?
  STRATA_HOST_DEVICE static bool before(float va, int64_t ia, float vb, int64_t ib) {
    const bool na = va != va, nb = vb != vb;
    if (na != nb) return na;
    if (!na && va != vb) return va > vb;
    return ia > ib;
  }

  // Row i: picks its top_k in rank order and writes them to y.
  STRATA_HOST_DEVICE void row(int64_t i, const float* x, float* y) const {
    const float* xr = x + (i / axis_dist * dim) * axis_dist + i % axis_dist;
    float prev_v = 0.0f;
    int64_t prev_i = -1;
    for (int64_t k = 0; k < top_k; ++k) {
      int64_t best = -1;
      float best_v = 0.0f;
      for (int64_t j = 0; j < dim; ++j) {
        const float v = xr[j * axis_dist];
        if (prev_i >= 0 && !before(prev_v, prev_i, v, j)) continue;  // already taken
        if (best < 0 || before(v, j, best_v, best)) {
          best = j;
          best_v = v;
        }
      }
      if (has_axis) {
        y[(i / axis_dist * top_k + k) * axis_dist + i % axis_dist] = out_max_val ? best_v : static_cast<float>(best);
      } else if (out_max_val) {
        y[2 * i * top_k + k] = static_cast<float>(best);
        y[2 * i * top_k + top_k + k] = best_v;
      } else {
        y[i * top_k + k] = static_cast<float>(best);
      }
      prev_v = best_v;
      prev_i = best;
    }
  }
};

class ArgMaxLayer : public Layer {
 public:
  ArgMaxLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  bool can_backward_to(int /*bottom_index*/) const override { return false; }
  // Class indices (and their scores beside them) stay f32 in a net that stores activations in 16 bits.
  bool top_stays_f32(int /*top_index*/) const override { return true; }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in argmax.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  bool has_axis_;
  int64_t axis_param_ = 0;
  ArgMaxGeometry geom_{};
  int64_t rows_ = 0;  // set by reshape()
};

}  // namespace strata
