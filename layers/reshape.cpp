#include "layers/reshape.h"

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

namespace {
std::string dims_str(const std::vector<int64_t>& d) { return shape_str(Shape(d.begin(), d.end())); }
}  // namespace

ReshapeLayer::ReshapeLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("reshape_param");
  const std::string context = "reshape_param of " + where();
  if (!p.has("shape")) {
    fail<ConfigError>(context, " at ", spec.node.loc().str(),
                      ": needs reshape_param { shape { dim: ... } } (0 copies a bottom dim, -1 is inferred)");
  }
  const ConfigNode& shape = p.block("shape");
  shape.check_keys({"dim"}, "shape in " + context);
  dims_ = shape.get_ints("dim");
  axis_ = p.get_int("axis", 0);
  num_axes_ = p.get_int("num_axes", -1);
  int inferred = 0;
  for (int64_t d : dims_) {
    if (d < -1) {
      fail<ConfigError>(context, " at ", shape.loc().str(), ": dim ", d, " in shape ", dims_str(dims_),
                        " is invalid; use a size > 0, 0 to copy the bottom's dim, or -1 to infer it");
    }
    if (d == -1) ++inferred;
  }
  if (inferred > 1) {
    fail<ConfigError>(context, " at ", shape.loc().str(), ": shape ", dims_str(dims_),
                      " has ", inferred, " dims of -1; at most one dim can be inferred");
  }
  if (num_axes_ < -1) {
    fail<ConfigError>(context, ": num_axes must be >= -1 (-1 = all remaining axes), got ", num_axes_);
  }
}

LayerSchema ReshapeLayer::schema() {
  LayerSchema s;
  s.blocks = {{"reshape_param", {"shape", "axis", "num_axes"}}};
  s.examples = {
      layer_example("reshape_param { shape { dim: 0 dim: -1 } }", {{2, 3, 2, 2}}),
      layer_example("reshape_param { shape { dim: 0 dim: 2 dim: -1 dim: 3 } }", {{2, 12}}),
      layer_example("reshape_param { axis: 1 num_axes: 1 shape { dim: 3 dim: 1 } }", {{2, 3, 4}}),
  };
  s.summary = "Changes the shape (0 copies a bottom dim, -1 is inferred), values unchanged";
  return s;
}


void ReshapeLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& in = bottom[0]->shape();
  const int64_t n = static_cast<int64_t>(in.size());
  // Negative axis counts from the end, -1 meaning "after the last axis" (Caffe).
  const int64_t start = axis_ < 0 ? n + axis_ + 1 : axis_;
  const int64_t end = num_axes_ == -1 ? n : start + num_axes_;
  if (start < 0 || start > n || end > n) {
    shape_error("reshape_param axis " + std::to_string(axis_) + " num_axes " + std::to_string(num_axes_) +
                " does not fit the bottom " + shape_str(in));
  }
  const int64_t replaced = end - start;

  // The inferred dim is (elements of the replaced axes) / (product of the
  // other new dims). Copied dims that sit inside the replaced range cancel
  // out, which keeps the inference well defined for a zero-size batch.
  int64_t numerator = 1;
  int64_t denominator = 1;
  int64_t infer_at = -1;
  std::vector<bool> cancelled(static_cast<size_t>(replaced), false);
  Shape out(in.begin(), in.begin() + start);
  for (size_t i = 0; i < dims_.size(); ++i) {
    int64_t d = dims_[i];
    if (d == 0) {
      const int64_t src = start + static_cast<int64_t>(i);
      if (src >= n) {
        shape_error("reshape_param shape " + dims_str(dims_) + " copies (dim: 0) bottom axis " +
                    std::to_string(src) + ", but the bottom " + shape_str(in) + " has only " +
                    std::to_string(n) + " axes");
      }
      d = in[src];
      if (static_cast<int64_t>(i) < replaced) {
        cancelled[i] = true;
      } else {
        denominator *= d;
      }
    } else if (d == -1) {
      infer_at = static_cast<int64_t>(out.size());
    } else {
      denominator *= d;
    }
    out.push_back(d);
  }
  for (int64_t i = 0; i < replaced; ++i) {
    if (!cancelled[i]) numerator *= in[start + i];
  }
  out.insert(out.end(), in.begin() + end, in.end());

  auto mismatch = [&](const std::string& why) {
    shape_error("reshape_param shape " + dims_str(dims_) + " cannot reshape the bottom " + shape_str(in) +
                " (" + std::to_string(shape_numel(in)) + " elements): " + why +
                "; change the shape so its element count matches");
  };
  if (infer_at >= 0) {
    if (denominator == 0 ? numerator != 0 : numerator % denominator != 0) {
      mismatch(std::to_string(numerator) + " elements are not divisible by the given dims' product " +
               std::to_string(denominator));
    }
    out[infer_at] = denominator == 0 ? 0 : numerator / denominator;
  } else if (numerator != denominator) {
    mismatch("the result " + shape_str(out) + " has " + std::to_string(shape_numel(out)) + " elements");
  }
  top[0]->resize(out);
}

void ReshapeLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  top[0]->data.copy_from(bottom[0]->data);
}

void ReshapeLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (propagate_down[0]) bottom[0]->diff.copy_from(top[0]->diff);
}

STRATA_REGISTER_LAYER("Reshape", ReshapeLayer);

}  // namespace strata
