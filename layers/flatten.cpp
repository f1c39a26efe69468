#include "layers/flatten.h"

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

FlattenLayer::FlattenLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("flatten_param");
  axis_ = p.get_int("axis", 1);
  end_axis_ = p.get_int("end_axis", -1);
}

LayerSchema FlattenLayer::schema() {
  LayerSchema s;
  s.blocks = {{"flatten_param", {"axis", "end_axis"}}};
  s.examples = {
      layer_example("", {{2, 3, 2, 2}}),
      layer_example("flatten_param { axis: 2 end_axis: 3 }", {{2, 3, 2, 2}}),
      layer_example("flatten_param { axis: 0 end_axis: 1 }", {{2, 3, 4}}),
  };
  s.summary = "Merges a range of axes into one (default: all axes after the batch)";
  return s;
}


void FlattenLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& in = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(in.size());
  const int64_t a = axis_ < 0 ? axis_ + n : axis_;
  const int64_t e = end_axis_ < 0 ? end_axis_ + n : end_axis_;
  if (a < 0 || a >= n || e < 0 || e >= n || e < a) {
    shape_error("flatten_param axis " + std::to_string(axis_) + " / end_axis " + std::to_string(end_axis_) +
                " must name axes first <= last of the bottom, got " + shape_str(in) +
                "; adjust axis/end_axis to the bottom's " + std::to_string(n) + " axes");
  }
  Shape out(in.begin(), in.begin() + a);
  int64_t merged = 1;
  for (int64_t i = a; i <= e; ++i) merged *= in[i];
  out.push_back(merged);
  out.insert(out.end(), in.begin() + e + 1, in.end());
  top[0]->resize(out);
}

void FlattenLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  top[0]->data.copy_from(bottom[0]->data);
}

void FlattenLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (propagate_down[0]) bottom[0]->diff.copy_from(top[0]->diff);
}

STRATA_REGISTER_LAYER("Flatten", FlattenLayer);

}  // namespace strata
