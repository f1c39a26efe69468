#include "layers/deconvolution.h"

#include <cstring>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/math.h"

namespace strata {

namespace {

std::string hw_str(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

enum class Need { kRequired, kOptional };

// A spatial pair of convolution_param, as Convolution reads it: `key` (one
// value for both dims, or two for h, w) or `prefix`_h / `prefix`_w.
void read_pair(const ConfigNode& p, const std::string& context, const std::string& key, const std::string& prefix,
               int64_t def, int64_t min, Need need, int64_t* h, int64_t* w) {
  const std::string kh = prefix + "_h", kw = prefix + "_w";
  const std::vector<int64_t> v = p.get_ints(key);
  const bool has_hw = p.has(kh) || p.has(kw);
  if (!v.empty() && has_hw) {
    fail<ConfigError>(context, ": give either ", key, " or ", kh, "/", kw, ", not both");
  }
  if (has_hw) {
    if (need == Need::kRequired && !(p.has(kh) && p.has(kw))) {
      fail<ConfigError>(context, ": ", kh, " and ", kw, " must be given together");
    }
    *h = p.get_int(kh, def);
    *w = p.get_int(kw, def);
  } else if (v.size() == 1 || v.size() == 2) {
    *h = v[0];
    *w = v.back();
  } else if (v.empty()) {
    if (need == Need::kRequired) fail<ConfigError>(context, ": missing ", key, " (or ", kh, " and ", kw, ")");
    *h = *w = def;
  } else {
    fail<ConfigError>(context, ": ", key, " takes 1 value (both dims) or 2 (h, w) for a 2-D deconvolution, got ",
                      v.size());
  }
  if (*h < min || *w < min) {
    fail<ConfigError>(context, ": ", key, " must be >= ", min, ", got ", hw_str(*h, *w));
  }
}

}  // namespace

DeconvolutionLayer::DeconvolutionLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("convolution_param");
  const std::string context = "convolution_param of " + where() + " at " + p.loc().str();
  geom_.out_channels = p.get_int("num_output");
  if (geom_.out_channels <= 0) {
    fail<ConfigError>(context, ": num_output must be > 0, got ", geom_.out_channels);
  }
  read_pair(p, context, "kernel_size", "kernel", 0, 1, Need::kRequired, &geom_.kernel_h, &geom_.kernel_w);
  read_pair(p, context, "stride", "stride", 1, 1, Need::kOptional, &geom_.stride_h, &geom_.stride_w);
  read_pair(p, context, "pad", "pad", 0, 0, Need::kOptional, &geom_.pad_h, &geom_.pad_w);
  const std::vector<int64_t> dil = p.get_ints("dilation");
  if (dil.size() > 2) {
    fail<ConfigError>(context, ": dilation takes 1 value or 2 (h, w), got ", dil.size());
  }
  geom_.dil_h = dil.empty() ? 1 : dil[0];
  geom_.dil_w = dil.empty() ? 1 : dil.back();
  if (geom_.dil_h < 1 || geom_.dil_w < 1) {
    fail<ConfigError>(context, ": dilation must be >= 1, got ", hw_str(geom_.dil_h, geom_.dil_w));
  }
  geom_.group = p.get_int("group", 1);
  if (geom_.group < 1) fail<ConfigError>(context, ": group must be >= 1, got ", geom_.group);
  if (geom_.out_channels % geom_.group != 0) {
    fail<ConfigError>(context, ": num_output ", geom_.out_channels, " is not divisible by group ", geom_.group,
                      "; make num_output a multiple of group");
  }
  bias_ = p.get_bool("bias_term", true) ? Bias::kYes : Bias::kNo;
  p.get_enum("engine", {"DEFAULT", "CAFFE", "CUDNN"}, "DEFAULT");  // accepted for Caffe files; one engine here
  weight_filler_ = parse_filler(p.block("weight_filler"), default_weight_filler(), "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

ForwardCost DeconvolutionLayer::forward_cost(const BlobVec& bottom, const BlobVec& top) const {
  ForwardCost c = Layer::forward_cost(bottom, top);
  c.flops = 2 * weight_elements(*this) * output_positions(bottom[0]->shape());
  return c;
}

LayerSchema DeconvolutionLayer::schema() {
  LayerSchema s;
  s.work = LayerWork::kWeights;
  s.summary = "Transposed 2-D convolution (Caffe Deconvolution, PyTorch ConvTranspose2d): upsampling by stride";
  s.blocks = {{"convolution_param",
               {"num_output", "kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w", "pad",
                "pad_h", "pad_w", "dilation", "group", "bias_term", "weight_filler", "bias_filler", "engine"}}};
  // Bilinear in input and weights, like Convolution: central differences
  // are exact up to rounding.
  s.examples = {
      layer_example("convolution_param { num_output: 3 kernel_size: 3 bias_filler { type: 'gaussian' } }",
                    {{2, 2, 3, 3}}),
      layer_example("convolution_param { num_output: 2 kernel_size: 4 stride: 2 pad: 1 }", {{2, 3, 3, 2}}),
      layer_example("convolution_param { num_output: 4 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3 pad_h: 1 "
                    "pad_w: 0 dilation: 2 group: 2 bias_filler { type: 'gaussian' } }",
                    {{2, 4, 3, 2}}),
      layer_example("convolution_param { num_output: 2 kernel_size: 1 bias_term: false engine: CAFFE }",
                    {{2, 3, 2, 3}}),
  };
  return s;
}

void DeconvolutionLayer::check_bottom(const Shape& s) const {
  if (s.size() != 4) {
    shape_error("expected a 4-D NCHW bottom [N, C, H, W], got " + shape_str(s) +
                "; Deconvolution works on 2-D images only (add a Reshape layer for other inputs)");
  }
}

void DeconvolutionLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  geom_.channels = s[1];
  if (geom_.channels % geom_.group != 0) {
    shape_error("input channels " + std::to_string(geom_.channels) + " (bottom " + shape_str(s) +
                ") are not divisible by group " + std::to_string(geom_.group) +
                "; group must divide both the input channels and num_output");
  }
  Blob& w = add_param("weight", {geom_.channels, geom_.out_channels / geom_.group, geom_.kernel_h, geom_.kernel_w});
  fill(weight_filler_, w.data, rng_);
  if (bias_ == Bias::kYes) fill(bias_filler_, add_param("bias", {geom_.out_channels}).data, rng_);
}

void DeconvolutionLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  if (s[1] != geom_.channels) {
    shape_error("bottom " + shape_str(s) + " has " + std::to_string(s[1]) + " channels, but the weights were made for " +
                std::to_string(geom_.channels) + "; the channel count cannot change after setup");
  }
  num_ = s[0];
  geom_.height = s[2];
  geom_.width = s[3];
  geom_.out_h = geom_.stride_h * (s[2] - 1) + geom_.dil_h * (geom_.kernel_h - 1) + 1 - 2 * geom_.pad_h;
  geom_.out_w = geom_.stride_w * (s[3] - 1) + geom_.dil_w * (geom_.kernel_w - 1) + 1 - 2 * geom_.pad_w;
  if (geom_.out_h < 1 || geom_.out_w < 1) {
    shape_error("input " + shape_str(s) + " with kernel " + hw_str(geom_.kernel_h, geom_.kernel_w) + " (dilation " +
                hw_str(geom_.dil_h, geom_.dil_w) + "), stride " + hw_str(geom_.stride_h, geom_.stride_w) +
                " and pad " + hw_str(geom_.pad_h, geom_.pad_w) + " gives an output of " +
                hw_str(geom_.out_h, geom_.out_w) + "; the pad removes more than the deconvolution adds: use less pad");
  }
  top[0]->resize({num_, geom_.out_channels, geom_.out_h, geom_.out_w});
  if (device().is_cpu()) {
    col_.resize({geom_.out_channels * geom_.kernel_h * geom_.kernel_w, geom_.height * geom_.width});
  }
}

void DeconvolutionLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const DeconvGeometry& g = geom_;
  const int64_t hw = g.height * g.width, out_hw = g.out_h * g.out_w;
  const int64_t in_g = g.in_per_group(), out_g = g.out_per_group();
  const int64_t rows_g = out_g * g.kernel_h * g.kernel_w;  // col rows per group
  const float* x = bottom[0]->data.data<float>();
  const float* w = param(0).data.data<float>();
  const float* b = bias_ == Bias::kYes ? param(1).data.data<float>() : nullptr;
  float* y = top[0]->data.data<float>();
  float* col = col_.data<float>();
  for (int64_t n = 0; n < num_; ++n) {
    const float* xn = x + n * g.channels * hw;
    float* yn = y + n * g.out_channels * out_hw;
    // col_g = W_g^T x_g: W_g is [in_g, rows_g], x_g [in_g, H * W].
    for (int64_t grp = 0; grp < g.group; ++grp) {
      gemm(Transpose::kYes, Transpose::kNo, rows_g, hw, in_g, 1.0f, w + grp * in_g * rows_g, xn + grp * in_g * hw,
           0.0f, col + grp * rows_g * hw);
    }
    std::memset(yn, 0, sizeof(float) * g.out_channels * out_hw);
    col2im(col, g.out_channels, g.out_h, g.out_w, g.kernel_h, g.kernel_w, g.pad_h, g.pad_w, g.stride_h, g.stride_w,
           g.dil_h, g.dil_w, yn);
    if (b) {
      for (int64_t o = 0; o < g.out_channels; ++o) {
        for (int64_t j = 0; j < out_hw; ++j) yn[o * out_hw + j] += b[o];
      }
    }
  }
}

void DeconvolutionLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                      const BlobVec& bottom) {
  const DeconvGeometry& g = geom_;
  const int64_t hw = g.height * g.width, out_hw = g.out_h * g.out_w;
  const int64_t in_g = g.in_per_group(), out_g = g.out_per_group();
  const int64_t rows_g = out_g * g.kernel_h * g.kernel_w;
  const float* x = bottom[0]->data.data<float>();
  const float* w = param(0).data.data<float>();
  const float* dy = top[0]->diff.data<float>();
  float* dw = param(0).diff.data<float>();
  float* db = bias_ == Bias::kYes ? param(1).diff.data<float>() : nullptr;
  float* dx = propagate_down[0] ? bottom[0]->diff.data<float>() : nullptr;
  float* col = col_.data<float>();
  for (int64_t n = 0; n < num_; ++n) {
    const float* dyn = dy + n * g.out_channels * out_hw;
    if (db) {
      for (int64_t o = 0; o < g.out_channels; ++o) {
        double s = 0.0;
        for (int64_t j = 0; j < out_hw; ++j) s += dyn[o * out_hw + j];
        db[o] += static_cast<float>(s);
      }
    }
    // The top gradient seen through the windows: the deconvolution's
    // input positions are exactly a convolution's output positions.
    im2col(dyn, g.out_channels, g.out_h, g.out_w, g.kernel_h, g.kernel_w, g.pad_h, g.pad_w, g.stride_h, g.stride_w,
           g.dil_h, g.dil_w, col);
    const float* xn = x + n * g.channels * hw;
    for (int64_t grp = 0; grp < g.group; ++grp) {
      // dW_g += x_g col_g^T; dx_g = W_g col_g.
      gemm(Transpose::kNo, Transpose::kYes, in_g, rows_g, hw, 1.0f, xn + grp * in_g * hw, col + grp * rows_g * hw,
           1.0f, dw + grp * in_g * rows_g);
      if (dx) {
        gemm(Transpose::kNo, Transpose::kNo, in_g, hw, rows_g, 1.0f, w + grp * in_g * rows_g, col + grp * rows_g * hw,
             0.0f, dx + n * g.channels * hw + grp * in_g * hw);
      }
    }
  }
}

STRATA_REGISTER_LAYER("Deconvolution", DeconvolutionLayer);

}  // namespace strata
