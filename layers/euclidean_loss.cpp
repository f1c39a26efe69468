#include "layers/euclidean_loss.h"

#include <algorithm>
#include <string>

#include "framework/layer_registry.h"
#include "layers/loss_layer.h"

namespace strata {

LayerSchema EuclideanLossLayer::schema() {
  LayerSchema s;
  s.summary = "Sum of squared differences / (2 N) between two bottoms, both differentiated (Caffe's EuclideanLoss)";
  s.examples = {
      layer_example("", {{2, 3}, {2, 3}}),
      layer_example("", {{3, 2, 2}, {3, 4}}),  // same count per sample, different shapes (as Caffe allows)
  };
  return s;
}

void EuclideanLossLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& a = bottom[0]->data;
  const Tensor& b = bottom[1]->data;
  const int64_t n = loss_batch(a.shape());
  if (b.numel() != a.numel() || loss_batch(b.shape()) != n) {
    shape_error("the two bottoms must have the same batch size and count per sample, got " + shape_str(a.shape()) +
                " and " + shape_str(b.shape()) + "; reshape one of them (e.g. with Reshape or Flatten)");
  }
  top[0]->resize({});
}

double EuclideanLossLayer::divisor(const BlobVec& bottom) const {
  return 2.0 * static_cast<double>(std::max<int64_t>(1, loss_batch(bottom[0]->shape())));
}

void EuclideanLossLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  const float* a = bottom[0]->data.data<float>();
  const float* b = bottom[1]->data.data<float>();
  diff_.resize(static_cast<size_t>(n));
  float* d = diff_.data();
  const double total = deterministic_sum(n, [&](int64_t i) {
    d[i] = a[i] - b[i];
    return static_cast<double>(d[i]) * d[i];
  });
  top[0]->data.data<float>()[0] = static_cast<float>(total / divisor(bottom));
}

void EuclideanLossLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                      const BlobVec& bottom) {
  // d/da of sum(d^2) / (2N) is d / N = 2 d / divisor.
  const float scale = static_cast<float>(2.0 * top[0]->diff.data<float>()[0] / divisor(bottom));
  for (int k = 0; k < 2; ++k) {
    if (!propagate_down[k]) continue;
    const float s = k == 0 ? scale : -scale;
    float* dx = bottom[k]->diff.data<float>();
    const int64_t n = bottom[k]->numel();
    for (int64_t i = 0; i < n; ++i) dx[i] = s * diff_[static_cast<size_t>(i)];
  }
}

STRATA_REGISTER_LAYER("EuclideanLoss", EuclideanLossLayer);

}  // namespace strata
