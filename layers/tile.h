// Tile (Caffe "Tile"): repeats the bottom `tiles` times along an axis:
// with the bottom viewed as [outer, inner] (inner = the axis and all after
// it), the top is [outer, tiles * inner], each row the bottom's row `tiles`
// times over (numpy's tile on that axis). Backward sums the copies.
//
// The per-element formulas are shared by tile.cpp and tile.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

// Top element t copies bottom element tile_source(t).
STRATA_HOST_DEVICE int64_t tile_source(int64_t t, int64_t inner, int64_t tiles) {
  return t / (inner * tiles) * inner + t % inner;
}

// Gradient of bottom element j: the sum over its copies.
STRATA_HOST_DEVICE float tile_grad_at(int64_t j, int64_t inner, int64_t tiles, const float* dy) {
  const float* row = dy + j / inner * inner * tiles + j % inner;
  float s = 0.0f;
  for (int64_t k = 0; k < tiles; ++k) s += row[k * inner];
  return s;
}

class TileLayer : public Layer {
 public:
  TileLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in tile.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  int64_t axis_param_;
  int64_t tiles_;
  int64_t inner_ = 0;  // count from the axis on, set by reshape()
};

}  // namespace strata
