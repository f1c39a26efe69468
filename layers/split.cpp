#include "layers/split.h"

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

LayerSchema SplitLayer::schema() {
  LayerSchema s;
  // LayerExample has no top count, and the generic harness gives a layer
  // with max_tops() == -1 a single top; tests/shape_layers_test.cpp covers
  // several tops, the Net's automatic insertion and a user-written Split.
  s.examples = {layer_example("", {{2, 3, 2}})};
  s.summary = "Copies one bottom to several tops; backward sums their gradients";
  return s;
}

void SplitLayer::setup(const BlobVec& bottom, const BlobVec& top) {
  for (size_t i = 0; i < top.size(); ++i) {
    if (top[i] == bottom[0]) {
      fail<ConfigError>(where_at(), ": top ", i,
                        " is the bottom itself; Split cannot run in place, give each top its own name");
    }
  }
}

void SplitLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  for (Blob* t : top) t->resize(bottom[0]->shape());
}

void SplitLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  for (Blob* t : top) {
    if (!is_bottom_memory(t->data, bottom[0]->data)) t->data.copy_from(bottom[0]->data);  // any dtype
  }
}

void SplitLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                              const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  Tensor& grad = bottom[0]->diff;
  for (const Blob* t : top) check_same_storage("Split backward", {&grad, &t->diff});
  const int64_t n = bottom[0]->numel();
  if (grad.dtype() == DType::kF32) {
    float* dx = grad.data<float>();
    parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      const float* d0 = top[0]->diff.data<float>();
      for (int64_t j = b; j < e; ++j) dx[j] = d0[j];
      for (size_t i = 1; i < top.size(); ++i) {
        const float* d = top[i]->diff.data<float>();
        for (int64_t j = b; j < e; ++j) dx[j] += d[j];
      }
    });
    return;
  }
  with_float_element(grad.dtype(), "Split backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    std::vector<const T*> d(top.size());
    for (size_t i = 0; i < top.size(); ++i) d[i] = top[i]->diff.data<T>();
    T* dx = grad.data<T>();
    parallel_for(n, 4096, [&](int64_t b, int64_t end) {
      for (int64_t j = b; j < end; ++j) {
        float sum = E::load(d[0][j]);
        for (size_t i = 1; i < d.size(); ++i) sum += E::load(d[i][j]);
        dx[j] = E::store(sum);
      }
    });
  });
}

STRATA_REGISTER_LAYER("Split", SplitLayer);

}  // namespace strata
