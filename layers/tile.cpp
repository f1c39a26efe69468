#include "layers/tile.h"

#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

TileLayer::TileLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("tile_param");
  axis_param_ = p.get_int("axis", 1);
  if (!p.has("tiles")) {
    fail<ConfigError>("tile_param of ", where(), " at ", p.loc().str(),
                      ": missing tiles (how many copies along the axis)");
  }
  tiles_ = p.get_int("tiles");
  if (tiles_ < 1) {
    fail<ConfigError>("tile_param of ", where(), " at ", p.loc().str(), ": tiles must be >= 1, got ", tiles_);
  }
}

LayerSchema TileLayer::schema() {
  LayerSchema s;
  s.summary = "Repeats the bottom a number of times along an axis (Caffe Tile)";
  s.blocks = {{"tile_param", {"axis", "tiles"}}};
  s.examples = {
      layer_example("tile_param { tiles: 3 }", {{2, 2, 3}}),
      layer_example("tile_param { axis: -1 tiles: 2 }", {{2, 3, 2}}),
      layer_example("tile_param { axis: 0 tiles: 2 }", {{2, 3}}),
  };
  return s;
}


void TileLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(s.size());
  const int64_t axis = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  if (axis < 0 || axis >= n) {
    shape_error("tile_param axis " + std::to_string(axis_param_) + " is out of range for bottom " + shape_str(s) +
                "; set it to one of its " + std::to_string(n) + " axes");
  }
  inner_ = bottom[0]->data.count(static_cast<int>(axis));
  Shape out = s;
  out[axis] *= tiles_;
  top[0]->resize(out);
}

void TileLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t inner = inner_, tiles = tiles_;
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(top[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) y[t] = x[tile_source(t, inner, tiles)];
  });
}

void TileLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t inner = inner_, tiles = tiles_;
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  parallel_for(bottom[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) dx[j] = tile_grad_at(j, inner, tiles, dy);
  });
}

STRATA_REGISTER_LAYER("Tile", TileLayer);

}  // namespace strata
