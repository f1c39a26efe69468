#include "layers/crop.h"

#include <cstring>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"

namespace strata {

CropLayer::CropLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("crop_param");
  axis_param_ = p.get_int("axis", 2);
  offsets_ = p.get_ints("offset");
  for (int64_t o : offsets_) {
    if (o < 0) {
      fail<ConfigError>("crop_param of ", where(), " at ", p.loc().str(), ": offset must be >= 0, got ", o);
    }
  }
}

LayerSchema CropLayer::schema() {
  LayerSchema s;
  s.summary = "Crops bottom 0 to the shape of bottom 1 from an axis on, at given offsets (Caffe Crop, FCN)";
  s.blocks = {{"crop_param", {"axis", "offset"}}};
  s.examples = {
      layer_example("crop_param { offset: 1 }", {{2, 3, 5, 4}, {2, 1, 3, 2}}),
      layer_example("crop_param { axis: 1 offset: 1 offset: 0 offset: 2 }", {{2, 3, 4, 5}, {2, 2, 3, 3}}),
      layer_example("crop_param { axis: -1 }", {{2, 3, 5}, {2, 1, 2}}),
      layer_example("", {{2, 2, 3, 3}, {2, 2, 3, 3}}),
  };
  return s;
}


void CropLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& in = bottom[0]->shape();
  const Shape& ref = bottom[1]->shape();
  const int64_t n = static_cast<int64_t>(in.size());
  if (static_cast<int64_t>(ref.size()) != n) {
    shape_error("bottom 0 " + shape_str(in) + " and bottom 1 " + shape_str(ref) +
                " must have the same number of axes (bottom 1 gives the shape to crop to)");
  }
  if (n > CropGeometry::kMaxAxes) {
    shape_error("Crop handles at most " + std::to_string(CropGeometry::kMaxAxes) + " axes, got bottom " +
                shape_str(in));
  }
  const int64_t axis = axis_param_ < 0 ? axis_param_ + n : axis_param_;
  if (axis < 0 || axis >= n) {
    shape_error("crop_param axis " + std::to_string(axis_param_) + " is out of range for bottom 0 " + shape_str(in) +
                "; set it to one of its " + std::to_string(n) + " axes");
  }
  const int64_t cropped = n - axis;
  if (offsets_.size() > 1 && static_cast<int64_t>(offsets_.size()) != cropped) {
    shape_error("crop_param has " + std::to_string(offsets_.size()) + " offsets for " + std::to_string(cropped) +
                " cropped axes (" + std::to_string(axis) + ".." + std::to_string(n - 1) +
                "); give none (0), one for all, or one per cropped axis");
  }
  Shape out = in;
  geom_.axes = static_cast<int>(n);
  for (int64_t d = 0; d < n; ++d) {
    int64_t off = 0;
    if (d >= axis) {
      off = offsets_.empty() ? 0 : offsets_.size() == 1 ? offsets_[0] : offsets_[static_cast<size_t>(d - axis)];
      out[d] = ref[d];
      if (off + ref[d] > in[d]) {
        shape_error("crop on axis " + std::to_string(d) + " takes " + std::to_string(ref[d]) + " from offset " +
                    std::to_string(off) + ", past the end of bottom 0 " + shape_str(in) +
                    " (size " + std::to_string(in[d]) + "); bottom 1 " + shape_str(ref) +
                    " must fit inside bottom 0 at the offsets");
      }
    }
    geom_.in[d] = in[d];
    geom_.out[d] = out[d];
    geom_.offset[d] = off;
  }
  top[0]->resize(out);
}

void CropLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const CropGeometry g = geom_;
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  parallel_for(top[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) y[t] = x[g.source(t)];
  });
}

void CropLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const CropGeometry g = geom_;
  bottom[0]->diff.zero();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  // Each top element has its own source: no two chunks write one element.
  parallel_for(top[0]->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) dx[g.source(t)] = dy[t];
  });
}

STRATA_REGISTER_LAYER("Crop", CropLayer);

}  // namespace strata
