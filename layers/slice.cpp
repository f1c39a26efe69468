#include "layers/slice.h"

#include <cstring>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

SliceLayer::SliceLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("slice_param");
  const std::string context = "slice_param of " + where() + " at " + p.loc().str();
  if (p.has("axis") && p.has("slice_dim")) {
    fail<ConfigError>(context, ": give either axis or the legacy slice_dim, not both");
  }
  if (p.has("slice_dim")) {
    axis_param_ = p.get_int("slice_dim");
    if (axis_param_ < 0) {
      fail<ConfigError>(context, ": slice_dim must be >= 0 (use axis for negative indexing), got ", axis_param_);
    }
  } else {
    axis_param_ = p.get_int("axis", 1);
  }
  points_ = p.get_ints("slice_point");
  for (size_t i = 0; i < points_.size(); ++i) {
    if (points_[i] <= (i == 0 ? 0 : points_[i - 1])) {
      fail<ConfigError>(context, ": slice_point values must be > 0 and strictly increasing, got ",
                        i == 0 ? std::string() : std::to_string(points_[i - 1]) + " then ", points_[i]);
    }
  }
  if (!points_.empty() && points_.size() + 1 != spec.tops.size()) {
    fail<ConfigError>(context, ": ", points_.size(), " slice_point value(s) cut the bottom into ", points_.size() + 1,
                      " parts, but the layer has ", spec.tops.size(), " top(s); give one slice_point fewer than tops");
  }
}

LayerSchema SliceLayer::schema() {
  LayerSchema s;
  s.summary = "Cuts one bottom into several tops along an axis, at slice points or into equal parts";
  s.blocks = {{"slice_param", {"axis", "slice_point", "slice_dim"}}};
  // The generic harness gives a layer with any number of tops one top;
  // the golden cases and tests/caffe_layers_test.cpp cover several.
  s.examples = {
      layer_example("", {{2, 4, 3}}),
      layer_example("slice_param { axis: -1 }", {{2, 3, 2}}),
      layer_example("slice_param { slice_dim: 0 }", {{3, 2}}),
  };
  return s;
}

void SliceLayer::setup(const BlobVec& bottom, const BlobVec& top) {
  for (size_t i = 0; i < top.size(); ++i) {
    if (top[i] == bottom[0]) {
      fail<ConfigError>(where_at(), ": top ", i,
                        " is the bottom itself; Slice cannot run in place, give each top its own name");
    }
  }
}

void SliceLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(s.size());
  axis_ = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  if (axis_ < 0 || axis_ >= n) {
    shape_error("slice axis " + std::to_string(axis_param_) + " is out of range for bottom " + shape_str(s) +
                "; set slice_param { axis } to one of its " + std::to_string(n) + " axes");
  }
  const int64_t dim = s[axis_];
  const int64_t tops = static_cast<int64_t>(top.size());
  sizes_.assign(top.size(), 0);
  if (points_.empty()) {
    if (dim % tops != 0) {
      shape_error("bottom " + shape_str(s) + " has " + std::to_string(dim) + " on axis " + std::to_string(axis_) +
                  ", which does not split into " + std::to_string(tops) +
                  " equal tops; give slice_point values for unequal parts");
    }
    sizes_.assign(top.size(), dim / tops);
  } else {
    if (points_.back() >= dim) {
      shape_error("slice_point " + std::to_string(points_.back()) + " is not inside axis " + std::to_string(axis_) +
                  " of bottom " + shape_str(s) + " (size " + std::to_string(dim) +
                  "); every slice_point must be < that size");
    }
    int64_t prev = 0;
    for (size_t i = 0; i < points_.size(); ++i) {
      sizes_[i] = points_[i] - prev;
      prev = points_[i];
    }
    sizes_.back() = dim - prev;
  }
  outer_ = bottom[0]->data.count(0, static_cast<int>(axis_));
  inner_ = bottom[0]->data.count(static_cast<int>(axis_) + 1);
  for (size_t i = 0; i < top.size(); ++i) {
    Shape t = s;
    t[axis_] = sizes_[i];
    top[i]->resize(t);
  }
}

namespace {
enum class Direction { kScatter, kGather };

// Each top's [outer, size_i * inner] block from or to its column range of
// the bottom's [outer, dim * inner]. `field` picks data or diff.
void move_parts(Direction dir, Blob& whole, const BlobVec& parts, const std::vector<int64_t>& sizes,
                Tensor Blob::*field, int64_t outer, int64_t inner) {
  int64_t dim = 0;
  for (int64_t s : sizes) dim += s;
  const int64_t row = dim * inner;
  float* w = (whole.*field).data<float>();
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t part_row = sizes[i] * inner;
    if (part_row > 0 && outer > 0) {
      float* p = (parts[i]->*field).data<float>();
      parallel_for(outer, 64, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          if (dir == Direction::kScatter) {
            std::memcpy(p + o * part_row, w + o * row + offset, sizeof(float) * part_row);
          } else {
            std::memcpy(w + o * row + offset, p + o * part_row, sizeof(float) * part_row);
          }
        }
      });
    }
    offset += part_row;
  }
}
}  // namespace

void SliceLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  move_parts(Direction::kScatter, *bottom[0], top, sizes_, &Blob::data, outer_, inner_);
}

void SliceLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  move_parts(Direction::kGather, *bottom[0], top, sizes_, &Blob::diff, outer_, inner_);
}

STRATA_REGISTER_LAYER("Slice", SliceLayer);

}  // namespace strata
