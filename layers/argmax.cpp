#include "layers/argmax.h"

#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

ArgMaxLayer::ArgMaxLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("argmax_param");
  geom_.out_max_val = p.get_bool("out_max_val", false) ? 1 : 0;
  geom_.top_k = p.get_int("top_k", 1);
  if (geom_.top_k < 1) {
    fail<ConfigError>("argmax_param of ", where(), " at ", p.loc().str(), ": top_k must be >= 1, got ", geom_.top_k);
  }
  has_axis_ = p.has("axis");
  if (has_axis_) axis_param_ = p.get_int("axis");
  geom_.has_axis = has_axis_ ? 1 : 0;
}

LayerSchema ArgMaxLayer::schema() {
  LayerSchema s;
  s.summary = "Indices (and optionally values) of the top_k largest values per item or along an axis (Caffe ArgMax)";
  s.blocks = {{"argmax_param", {"out_max_val", "top_k", "axis"}}};
  // No gradient: the generic test checks shapes, zero batches and extreme values.
  s.examples = {
      layer_example("", {{2, 3, 2, 2}}),
      layer_example("argmax_param { out_max_val: true top_k: 3 }", {{3, 5}}),
      layer_example("argmax_param { axis: 1 top_k: 2 }", {{2, 4, 3}}),
      layer_example("argmax_param { axis: -1 out_max_val: true }", {{2, 3, 4}}),
  };
  return s;
}


void ArgMaxLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(s.size());
  Shape out;
  if (has_axis_) {
    const int64_t axis = axis_param_ < 0 ? axis_param_ + n : axis_param_;
    if (axis < 0 || axis >= n) {
      shape_error("argmax_param axis " + std::to_string(axis_param_) + " is out of range for bottom " + shape_str(s) +
                  "; set it to one of its " + std::to_string(n) + " axes");
    }
    geom_.dim = s[axis];
    geom_.axis_dist = bottom[0]->data.count(static_cast<int>(axis) + 1);
    out = s;
    out[axis] = geom_.top_k;
  } else {
    if (n < 1) shape_error("expected a bottom with a batch axis, got " + shape_str(s));
    geom_.dim = bottom[0]->data.count(1);
    geom_.axis_dist = 1;
    out.assign(static_cast<size_t>(n < 3 ? 3 : n), 1);
    out[0] = s[0];
    out[1] = geom_.out_max_val ? 2 : 1;
    out[2] = geom_.top_k;
  }
  if (geom_.top_k > geom_.dim) {
    shape_error("top_k " + std::to_string(geom_.top_k) + " exceeds the " + std::to_string(geom_.dim) +
                " values to choose from in bottom " + shape_str(s) +
                (has_axis_ ? " along the axis" : " per item") + "; use a smaller argmax_param top_k");
  }
  rows_ = geom_.dim > 0 ? bottom[0]->numel() / geom_.dim : 0;
  top[0]->resize(out);
}

void ArgMaxLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const ArgMaxGeometry g = geom_;
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(rows_, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) g.row(i, x, y);
  });
}

void ArgMaxLayer::backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& /*propagate_down*/,
                               const BlobVec& /*bottom*/) {}

STRATA_REGISTER_LAYER("ArgMax", ArgMaxLayer);

}  // namespace strata
