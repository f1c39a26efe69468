#include "layers/concat.h"

#include <cstring>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

ConcatLayer::ConcatLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("concat_param");
  if (p.has("axis") && p.has("concat_dim")) {
    fail<ConfigError>("concat_param of ", where(), " at ", p.loc().str(),
                      ": give either axis or the legacy concat_dim, not both");
  }
  if (p.has("concat_dim")) {
    axis_param_ = p.get_int("concat_dim");
    if (axis_param_ < 0) {
      fail<ConfigError>("concat_param of ", where(), " at ", p.loc().str(),
                        ": concat_dim must be >= 0 (use axis for negative indexing), got ", axis_param_);
    }
  } else {
    axis_param_ = p.get_int("axis", 1);
  }
}

LayerSchema ConcatLayer::schema() {
  LayerSchema s;
  s.blocks = {{"concat_param", {"axis", "concat_dim"}}};
  s.examples = {
      layer_example("", {{2, 2, 3}, {2, 3, 3}}),
      layer_example("concat_param { axis: -1 }", {{2, 3, 2}, {2, 3, 1}, {2, 3, 2}}),
      layer_example("concat_param { axis: 0 }", {{2, 3}, {1, 3}}),
  };
  s.summary = "Joins its bottoms along one axis (default 1, channels)";
  return s;
}


void ConcatLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& first = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(first.size());
  axis_ = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  if (axis_ < 0 || axis_ >= n) {
    shape_error("concat axis " + std::to_string(axis_param_) + " is out of range for bottom 0 " +
                shape_str(first) + "; set concat_param { axis } to one of its " + std::to_string(n) + " axes");
  }
  Shape out = first;
  for (size_t i = 1; i < bottom.size(); ++i) {
    const Shape& s = bottom[i]->shape();
    bool ok = static_cast<int64_t>(s.size()) == n;
    for (int64_t a = 0; ok && a < n; ++a) ok = a == axis_ || s[a] == first[a];
    if (!ok) {
      shape_error("bottoms must match on every axis except the concat axis " + std::to_string(axis_) +
                  ", got bottom 0 " + shape_str(first) + " and bottom " + std::to_string(i) + " " +
                  shape_str(s));
    }
    out[axis_] += s[axis_];
  }
  outer_ = bottom[0]->data.count(0, static_cast<int>(axis_));
  inner_ = bottom[0]->data.count(static_cast<int>(axis_) + 1);
  top[0]->resize(out);
}

namespace {
enum class Direction { kGather, kScatter };

// Moves each bottom's [outer, dim_i * inner] block to or from its column
// range in the top's [outer, top_dim * inner] layout. `field` picks data or diff.
void move_slices(Direction dir, const BlobVec& parts, const std::vector<bool>& enabled, Blob& whole,
                 Tensor Blob::*field, int64_t outer, int64_t inner, int64_t axis) {
  const int a = static_cast<int>(axis);
  const int64_t top_row = whole.data.dim(a) * inner;
  Tensor& all = whole.*field;
  const size_t elem = dtype_size(all.dtype());  // any dtype: bytes are moved, not values
  char* w = static_cast<char*>(all.raw_data());
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t row = parts[i]->data.dim(a) * inner;
    if (enabled[i] && row > 0 && outer > 0) {
      Tensor& part = parts[i]->*field;
      if (part.dtype() != all.dtype()) {
        fail<ShapeError>("Concat: bottom ", i, " is ", dtype_name(part.dtype()), " but the top is ",
                         dtype_name(all.dtype()), "; one call's blobs must be of one dtype");
      }
      char* p = static_cast<char*>(part.raw_data());
      const size_t row_bytes = elem * static_cast<size_t>(row);
      parallel_for(outer, 64, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          char* wp = w + elem * static_cast<size_t>(o * top_row + offset);
          char* pp = p + row_bytes * static_cast<size_t>(o);
          if (dir == Direction::kGather) {
            std::memcpy(wp, pp, row_bytes);
          } else {
            std::memcpy(pp, wp, row_bytes);
          }
        }
      });
    }
    offset += row;
  }
}
}  // namespace

void ConcatLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  all_.assign(bottom.size(), true);
  move_slices(Direction::kGather, bottom, all_, *top[0], &Blob::data, outer_, inner_, axis_);
}

void ConcatLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                               const BlobVec& bottom) {
  move_slices(Direction::kScatter, bottom, propagate_down, *top[0], &Blob::diff, outer_, inner_, axis_);
}

STRATA_REGISTER_LAYER("Concat", ConcatLayer);

}  // namespace strata
