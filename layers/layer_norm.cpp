#include "layers/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

LayerNormLayer::LayerNormLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("layer_norm_param");
  eps_ = p.get_double("eps", 1e-5);
  if (!(eps_ > 0.0)) {
    fail<ConfigError>("layer_norm_param of ", where(), " at ", p.loc().str(), ": eps must be > 0, got ", eps_);
  }
  axis_ = static_cast<int>(p.get_int("axis", -1));
  FillerSpec one;
  one.value = 1.0f;
  weight_filler_ = parse_filler(p.block("weight_filler"), one, "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

LayerSchema LayerNormLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kNormalization;
  s.summary = "Layer normalisation over the dims from `axis` (default -1) with a learned weight and bias "
              "(PyTorch LayerNorm)";
  s.blocks = {{"layer_norm_param", {"eps", "axis", "weight_filler", "bias_filler"}}};
  const std::string affine =
      "layer_norm_param { weight_filler { type: 'gaussian' mean: 1 std: 0.5 } "
      "bias_filler { type: 'gaussian' std: 0.5 } }";
  s.examples = {
      layer_example(affine, {{2, 3, 5}}),
      layer_example("layer_norm_param { axis: 1 eps: 1e-6 }", {{2, 3, 2, 2}}),
  };
  // Normalising amplifies the finite-difference step by 1 / std of the row;
  // the rows here have std ~1, so the default step and tolerance hold.
  return s;
}

int LayerNormLayer::canonical_axis(const Shape& s) const {
  const int ndim = static_cast<int>(s.size());
  const int axis = axis_ < 0 ? axis_ + ndim : axis_;
  if (axis < 0 || axis >= ndim) {
    shape_error("layer_norm_param axis " + std::to_string(axis_) + " is out of range for the " +
                std::to_string(ndim) + "-D bottom " + shape_str(s) + "; use an axis in [" + std::to_string(-ndim) +
                ", " + std::to_string(ndim - 1) + "]");
  }
  return axis;
}

void LayerNormLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  d_ = bottom[0]->data.count(canonical_axis(s));
  if (d_ <= 0) shape_error("expected at least one value to normalise per row, got bottom " + shape_str(s));
  Blob& w = add_param("weight", {d_});
  fill(weight_filler_, w.data, rng_);
  Blob& b = add_param("bias", {d_});
  fill(bias_filler_, b.data, rng_);
}

void LayerNormLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const int axis = canonical_axis(s);
  const int64_t d = bottom[0]->data.count(axis);
  if (d != d_) {
    shape_error("expected " + std::to_string(d_) + " values per normalised row (the product of the bottom dims from axis " +
                std::to_string(axis) + ", as at setup), got bottom " + shape_str(s) + " with " + std::to_string(d) +
                "; weight and bias are fixed at setup, so keep those dims constant");
  }
  rows_ = bottom[0]->data.count(0, axis);
  top[0]->reshape_like(*bottom[0]);
}

LayerNormLayer::Kept LayerNormLayer::lay_out_kept(ScratchCarver& c) const {
  Kept k;
  k.mean = c.take({rows_});
  k.rstd = c.take({rows_});
  return k;
}

size_t LayerNormLayer::kept_bytes() const {
  ScratchCarver counter;
  lay_out_kept(counter);
  return counter.bytes();
}

LayerNormLayer::Kept LayerNormLayer::take_kept() {
  ScratchCarver carver(kept(kept_bytes()));
  return lay_out_kept(carver);
}

Shape LayerNormLayer::partials_shape() const {
  // Enough chunks to fill the GPU, each of at least 64 rows.
  return {2, std::min<int64_t>((rows_ + 63) / 64, 1024), d_};
}

size_t LayerNormLayer::scratch_bytes() const {
  if (device().is_cpu() || phase() != Phase::kTrain) return 0;
  ScratchCarver counter;
  counter.take(partials_shape());
  return counter.bytes();
}

namespace {
int64_t row_chunk(int64_t d) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d)); }
}  // namespace

void LayerNormLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("LayerNorm forward", {&xt, &yt});
  const ResidualSum& sum = residual_sum();
  if (!sum.none()) {
    check_same_storage("LayerNorm forward", {&xt, &sum.a->data, &sum.b->data});
    STRATA_CHECK(sum.a->numel() == xt.numel() && sum.b->numel() == xt.numel(), where(), ": the residual sum's ",
                 sum.a->numel(), " + ", sum.b->numel(), " elements do not match the bottom's ", xt.numel());
  }
  const float* w = param(0).data.data<float>();
  const float* b = param(1).data.data<float>();
  Kept kept = take_kept();
  float* mean = kept.mean.data<float>();
  float* rstd = kept.rstd.data<float>();
  const int64_t d = d_;
  // f32, or bf16/f16 widened per element: the statistics and the arithmetic in f32 (double sums), y rounded once.
  with_float_element(xt.dtype(), "LayerNorm forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    // A fused residual sum: the row's x = a + b, written first (as Eltwise SUM does), read back below.
    const T* ra = sum.none() ? nullptr : sum.a->data.data<T>();
    const T* rb = sum.none() ? nullptr : sum.b->data.data<T>();
    T* rx = sum.none() ? nullptr : xt.data<T>();
    parallel_for(rows_, row_chunk(d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        if (rx) {
          for (int64_t j = r * d; j < (r + 1) * d; ++j) rx[j] = E::store(E::load(ra[j]) + E::load(rb[j]));
        }
        const T* xr = x + r * d;
        // Two passes in double: exact enough for rows with a large mean.
        double sum = 0.0;
        for (int64_t j = 0; j < d; ++j) sum += E::load(xr[j]);
        const double mu = sum / static_cast<double>(d);
        double sq = 0.0;
        for (int64_t j = 0; j < d; ++j) {
          const double c = E::load(xr[j]) - mu;
          sq += c * c;
        }
        const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps_);
        mean[r] = static_cast<float>(mu);
        rstd[r] = static_cast<float>(inv);
        const float m = mean[r], is = rstd[r];
        T* yr = y + r * d;
        for (int64_t j = 0; j < d; ++j) yr[j] = E::store((E::load(xr[j]) - m) * is * w[j] + b[j]);
      }
    });
  });
}

// With xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dweight += sum over rows of dy * xhat, dbias += sum over rows of dy.
void LayerNormLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                  const BlobVec& bottom) {
  const Tensor& xt = bottom[0]->data;
  const Tensor& dyt = top[0]->diff;
  check_same_storage("LayerNorm backward", {&xt, &dyt});
  const float* w = param(0).data.data<float>();
  float* dw = param(0).diff.data<float>();
  float* db = param(1).diff.data<float>();
  const Kept kept = take_kept();  // as forward left it
  const float* mean = kept.mean.data<float>();
  const float* rstd = kept.rstd.data<float>();
  const int64_t d = d_, rows = rows_;
  with_float_element(xt.dtype(), "LayerNorm backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* x = xt.data<T>();
    const T* dy = dyt.data<T>();
    // Parameter gradients: threads own column ranges, so no reduction is needed.
    parallel_for(d, std::max<int64_t>(16, 16384 / std::max<int64_t>(1, rows)), [&](int64_t jb, int64_t je) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * d;
        const T* gr = dy + r * d;
        const float m = mean[r], is = rstd[r];
        for (int64_t j = jb; j < je; ++j) {
          const float g = E::load(gr[j]);
          dw[j] += g * (E::load(xr[j]) - m) * is;
          db[j] += g;
        }
      }
    });

    if (!propagate_down[0]) return;
    check_same_storage("LayerNorm backward", {&dyt, &bottom[0]->diff});
    T* dx = bottom[0]->diff.data<T>();
    parallel_for(rows, row_chunk(d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * d;
        const T* gr = dy + r * d;
        const float m = mean[r], is = rstd[r];
        double sum_g = 0.0, sum_gx = 0.0;
        for (int64_t j = 0; j < d; ++j) {
          const double g = static_cast<double>(E::load(gr[j])) * w[j];
          sum_g += g;
          sum_gx += g * ((E::load(xr[j]) - m) * is);
        }
        const float mg = static_cast<float>(sum_g / static_cast<double>(d));
        const float mgx = static_cast<float>(sum_gx / static_cast<double>(d));
        T* dxr = dx + r * d;
        for (int64_t j = 0; j < d; ++j) {
          const float xhat = (E::load(xr[j]) - m) * is;
          dxr[j] = E::store(is * (E::load(gr[j]) * w[j] - mg - xhat * mgx));
        }
      }
    });
  });
}

STRATA_REGISTER_LAYER("LayerNorm", LayerNormLayer);

}  // namespace strata
