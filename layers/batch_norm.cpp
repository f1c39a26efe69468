#include "layers/batch_norm.h"

#include <cmath>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

BatchNormLayer::BatchNormLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("batch_norm_param");
  const bool global = p.get_bool("use_global_stats", ctx.phase == Phase::kTest);
  stats_ = global ? Stats::kGlobal : Stats::kBatch;
  moving_average_fraction_ = static_cast<float>(p.get_double("moving_average_fraction", 0.999));
  eps_ = static_cast<float>(p.get_double("eps", 1e-5));
  const std::string context = "batch_norm_param of " + where() + " at " + p.loc().str();
  if (!(moving_average_fraction_ >= 0.0f && moving_average_fraction_ <= 1.0f)) {
    fail<ConfigError>(context, ": moving_average_fraction must be in [0, 1] (PyTorch momentum = 1 - it), got ",
                      moving_average_fraction_);
  }
  if (!(eps_ > 0.0f)) fail<ConfigError>(context, ": eps must be > 0, got ", eps_);
}

LayerSchema BatchNormLayer::schema() {
  LayerSchema s;
  s.kind = LayerKind::kNormalization;
  s.blocks = {{"batch_norm_param", {"use_global_stats", "moving_average_fraction", "eps"}}};
  LayerExample train2d = layer_example("", {{4, 3}});
  // The objective's finite difference moves the batch statistics too, so the
  // batch has several samples and the tolerance is a little wider.
  train2d.tolerance = 3e-2f;
  LayerExample train4d = layer_example("", {{3, 2, 2, 2}});
  train4d.tolerance = 3e-2f;
  LayerExample global_train = layer_example("batch_norm_param { use_global_stats: true }", {{2, 3, 2, 2}});
  LayerExample test_phase = layer_example("", {{2, 3, 2}});
  test_phase.phase = Phase::kTest;
  s.examples = {train2d, train4d, global_train, test_phase};
  s.summary = "Normalises each channel by batch (TRAIN) or running (TEST) mean and variance";
  return s;
}

void BatchNormLayer::check_shape(const Shape& s) const {
  if (s.size() < 2) {
    shape_error("expected [N, C] or [N, C, H, W] input, got " + shape_str(s));
  }
  if (!params_.empty() && s[1] != params_[0].blob->shape()[0]) {
    shape_error("expected " + std::to_string(params_[0].blob->shape()[0]) +
                " channels (the size of running_mean), got bottom " + shape_str(s) +
                "; the channel count cannot change after setup");
  }
}

void BatchNormLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  check_shape(bottom[0]->shape());
  const int64_t c = bottom[0]->shape()[1];
  add_param("running_mean", {c}, Learnable::kNo).data.fill(0.0f);
  add_param("running_var", {c}, Learnable::kNo).data.fill(1.0f);
}

void BatchNormLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_shape(s);
  num_ = s[0];
  channels_ = s[1];
  spatial_ = bottom[0]->data.count(2);
  if (call_layout() == Layout::kNHWC) {
    // [N][spatial][C] is [N * spatial, C, 1]: every loop below as it is, and
    // its sums in the same order (image by image, pixel by pixel).
    num_ *= spatial_;
    spatial_ = 1;
  }
  mean_.resize({channels_});
  var_.resize({channels_});
  inv_std_.resize({channels_});
  if (stats_ == Stats::kBatch) grad_means_.resize({2, channels_});
  top[0]->resize(s);
}

BatchNormLayer::Kept BatchNormLayer::lay_out_kept(ScratchCarver& c) const {
  Kept k;
  if (keeps_x_norm()) k.x_norm = c.take({num_, channels_, spatial_}, call_dtype());
  return k;
}

size_t BatchNormLayer::kept_bytes() const {
  ScratchCarver counter;
  lay_out_kept(counter);
  return counter.bytes();
}

BatchNormLayer::Kept BatchNormLayer::take_kept() {
  const size_t bytes = kept_bytes();
  if (bytes == 0) return Kept{};
  ScratchCarver carver(kept(bytes));
  return lay_out_kept(carver);
}

// Two passes per channel in double: the mean, then the squared deviations,
// which stays accurate when |mean| >> std.
template <class E>
void BatchNormLayer::compute_batch_stats(const typename E::T* x) {
  const int64_t m = num_ * spatial_;
  float* mean = mean_.data<float>();
  float* var = var_.data<float>();
  parallel_for(channels_, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double sum = 0.0;
      for (int64_t n = 0; n < num_; ++n) {
        const typename E::T* p = x + (n * channels_ + c) * spatial_;
        for (int64_t i = 0; i < spatial_; ++i) sum += E::load(p[i]);
      }
      const double mu = m > 0 ? sum / static_cast<double>(m) : 0.0;
      double sq = 0.0;
      for (int64_t n = 0; n < num_; ++n) {
        const typename E::T* p = x + (n * channels_ + c) * spatial_;
        for (int64_t i = 0; i < spatial_; ++i) {
          const double d = E::load(p[i]) - mu;
          sq += d * d;
        }
      }
      mean[c] = static_cast<float>(mu);
      var[c] = m > 0 ? static_cast<float>(sq / static_cast<double>(m)) : 0.0f;
    }
  });
}

void BatchNormLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("BatchNorm forward", {&xt, &yt});
  float* mean = mean_.data<float>();
  float* inv_std = inv_std_.data<float>();
  const int64_t m = num_ * spatial_;
  Kept kept = take_kept();

  // f32, or bf16/f16 widened per element: statistics and arithmetic in f32 (double sums), y rounded once.
  with_float_element(xt.dtype(), "BatchNorm forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    if (stats_ == Stats::kGlobal) {
      const float* rm = param(0).data.data<float>();
      const float* rv = param(1).data.data<float>();
      for (int64_t c = 0; c < channels_; ++c) {
        mean[c] = rm[c];
        inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps_));
      }
    } else {
      if (m == 1 && phase() == Phase::kTrain) {
        shape_error("batch statistics need more than one value per channel, got bottom " +
                    shape_str(bottom[0]->shape()) +
                    "; use a larger batch or batch_norm_param { use_global_stats: true }");
      }
      compute_batch_stats<E>(x);
      const float* var = var_.data<float>();
      for (int64_t c = 0; c < channels_; ++c) {
        inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + eps_));
      }
      // Only TRAIN updates the running statistics: a TEST net computing batch
      // statistics must not disturb the weights it shares with training.
      if (phase() == Phase::kTrain && m > 1) {
        float* rm = param(0).data.data<float>();
        float* rv = param(1).data.data<float>();
        const double f = moving_average_fraction_;
        const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
        for (int64_t c = 0; c < channels_; ++c) {
          rm[c] = static_cast<float>(f * rm[c] + (1.0 - f) * mean[c]);
          rv[c] = static_cast<float>(f * rv[c] + (1.0 - f) * var[c] * unbias);
        }
      }
    }
    // x_norm is y as stored (y may be x's memory: in place), kept where a later layer overwrites y.
    T* xn = keeps_x_norm() ? kept.x_norm.data<T>() : nullptr;
    parallel_for(num_ * channels_, 16, [&](int64_t b, int64_t e) {
      for (int64_t plane = b; plane < e; ++plane) {
        const int64_t c = plane % channels_;
        const float mu = mean[c];
        const float is = inv_std[c];
        const int64_t off = plane * spatial_;
        for (int64_t i = 0; i < spatial_; ++i) {
          const T v = E::store((E::load(x[off + i]) - mu) * is);
          if (xn) xn[off + i] = v;
          y[off + i] = v;
        }
      }
    });
  });
}

void BatchNormLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                  const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;  // may be dy itself when in place
  check_same_storage("BatchNorm backward", {&dyt, &dxt});
  const float* inv_std = inv_std_.data<float>();
  const Kept kept = take_kept();  // as forward left it
  with_float_element(dyt.dtype(), "BatchNorm backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* dy = dyt.data<T>();
    T* dx = dxt.data<T>();
    if (stats_ == Stats::kGlobal) {
      parallel_for(num_ * channels_, 16, [&](int64_t b, int64_t e) {
        for (int64_t plane = b; plane < e; ++plane) {
          const float is = inv_std[plane % channels_];
          const int64_t off = plane * spatial_;
          for (int64_t i = 0; i < spatial_; ++i) dx[off + i] = E::store(E::load(dy[off + i]) * is);
        }
      });
      return;
    }
    // dx = inv_std * (dy - mean(dy) - x_norm * mean(dy * x_norm)), means per
    // channel; both sums are taken before dx (possibly dy's memory) is written.
    // The normalised input: forward's copy, or the top as forward left it.
    const T* xn = keeps_x_norm() ? kept.x_norm.data<T>() : top[0]->data.data<T>();
    const int64_t m = num_ * spatial_;
    float* mean_dy = grad_means_.data<float>();
    float* mean_dy_xn = mean_dy + channels_;
    channel_gradient_sums<E>(num_, channels_, spatial_, dy, xn, [&](int64_t c, double s1, double s2) {
      mean_dy[c] = m > 0 ? static_cast<float>(s1 / static_cast<double>(m)) : 0.0f;
      mean_dy_xn[c] = m > 0 ? static_cast<float>(s2 / static_cast<double>(m)) : 0.0f;
    });
    parallel_for(num_ * channels_, 16, [&](int64_t b, int64_t e) {
      for (int64_t plane = b; plane < e; ++plane) {
        const int64_t c = plane % channels_;
        const float is = inv_std[c], a = mean_dy[c], g = mean_dy_xn[c];
        const int64_t off = plane * spatial_;
        for (int64_t i = 0; i < spatial_; ++i) {
          dx[off + i] = E::store(is * (E::load(dy[off + i]) - a - E::load(xn[off + i]) * g));
        }
      }
    });
  });
}

STRATA_REGISTER_LAYER("BatchNorm", BatchNormLayer);

}  // namespace strata
