#include "layers/eltwise.h"

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

namespace {
constexpr int64_t kChunk = 4096;  // elements per thread chunk at least
}  // namespace

EltwiseLayer::EltwiseLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("eltwise_param");
  const std::string op = p.get_enum("operation", {"PROD", "SUM", "MAX"}, "SUM");
  op_ = op == "PROD" ? Op::kProd : op == "MAX" ? Op::kMax : Op::kSum;
  for (double c : p.get_doubles("coeff")) coeffs_.push_back(static_cast<float>(c));
  if (!coeffs_.empty() && op_ != Op::kSum) {
    fail<ConfigError>("eltwise_param of ", where(), " at ", p.loc().str(),
                      ": coeff applies only to operation SUM (got ", op, "); remove the coeff entries");
  }
  prod_grad_ = p.get_bool("stable_prod_grad", true) ? ProdGrad::kStable : ProdGrad::kDivide;
}

LayerSchema EltwiseLayer::schema() {
  LayerSchema s;
  s.blocks = {{"eltwise_param", {"operation", "coeff", "stable_prod_grad"}}};
  LayerExample divide = layer_example("eltwise_param { operation: PROD stable_prod_grad: false }", {{2, 3}, {2, 3}});
  divide.inputs = {InputKind::kPositive, InputKind::kPositive};  // top / x_i needs x_i != 0
  // Small step: the finite difference must not straddle a change of winner.
  LayerExample max = layer_example("eltwise_param { operation: MAX }", {{2, 3}, {2, 3}, {2, 3}});
  max.step = 1e-3f;
  s.examples = {
      layer_example("", {{2, 3, 2}, {2, 3, 2}}),
      layer_example("eltwise_param { operation: SUM coeff: 1 coeff: -0.5 coeff: 2 }", {{2, 3}, {2, 3}, {2, 3}}),
      layer_example("eltwise_param { operation: PROD }", {{2, 3, 2}, {2, 3, 2}, {2, 3, 2}}),
      divide,
      max,
  };
  s.summary = "Element-wise SUM (with coefficients), PROD or MAX of bottoms of the same shape";
  return s;
}

void EltwiseLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  if (op_ == Op::kSum) {
    if (coeffs_.empty()) coeffs_.assign(bottom.size(), 1.0f);
    if (coeffs_.size() != bottom.size()) {
      fail<ConfigError>("eltwise_param of ", where(), " at ", block("eltwise_param").loc().str(), ": got ",
                        coeffs_.size(), " coeff values for ", bottom.size(),
                        " bottoms; give one coeff per bottom (or none for all 1)");
    }
  }
}

void EltwiseLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& first = bottom[0]->shape();
  for (size_t i = 1; i < bottom.size(); ++i) {
    if (bottom[i]->shape() != first) {
      shape_error("all bottoms must have the same shape, got bottom 0 " + shape_str(first) + " and bottom " +
                  std::to_string(i) + " " + shape_str(bottom[i]->shape()) +
                  "; reshape or broadcast them first (e.g. with Scale/Bias layers)");
    }
  }
  top[0]->resize(first);
  if (op_ == Op::kMax) argmax_.resize(first);
}

void EltwiseLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  if (top[0]->data.dtype() != DType::kF32) return forward_stored_cpu(bottom, top);
  const int64_t n = top[0]->numel();
  float* y = top[0]->data.data<float>();
  const size_t k = bottom.size();
  parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
    switch (op_) {
      case Op::kSum: {
        const float* x0 = bottom[0]->data.data<float>();
        for (int64_t j = b; j < e; ++j) y[j] = coeffs_[0] * x0[j];
        for (size_t i = 1; i < k; ++i) {
          const float* x = bottom[i]->data.data<float>();
          const float c = coeffs_[i];
          for (int64_t j = b; j < e; ++j) y[j] += c * x[j];
        }
        break;
      }
      case Op::kProd: {
        const float* x0 = bottom[0]->data.data<float>();
        for (int64_t j = b; j < e; ++j) y[j] = x0[j];
        for (size_t i = 1; i < k; ++i) {
          const float* x = bottom[i]->data.data<float>();
          for (int64_t j = b; j < e; ++j) y[j] *= x[j];
        }
        break;
      }
      case Op::kMax: {
        int32_t* arg = argmax_.data<int32_t>();
        const float* x0 = bottom[0]->data.data<float>();
        for (int64_t j = b; j < e; ++j) {
          y[j] = x0[j];
          arg[j] = 0;
        }
        // Strict '>' so ties go to the earlier bottom, as in Caffe.
        for (size_t i = 1; i < k; ++i) {
          const float* x = bottom[i]->data.data<float>();
          for (int64_t j = b; j < e; ++j) {
            if (x[j] > y[j]) {
              y[j] = x[j];
              arg[j] = static_cast<int32_t>(i);
            }
          }
        }
        break;
      }
    }
  });
}

void EltwiseLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (top[0]->diff.dtype() != DType::kF32) return backward_stored_cpu(top, propagate_down, bottom);
  const int64_t n = top[0]->numel();
  const float* dy = top[0]->diff.data<float>();
  const size_t k = bottom.size();
  for (size_t i = 0; i < k; ++i) {
    if (!propagate_down[i]) continue;
    float* dx = bottom[i]->diff.data<float>();
    parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
      switch (op_) {
        case Op::kSum: {
          const float c = coeffs_[i];
          for (int64_t j = b; j < e; ++j) dx[j] = c * dy[j];
          break;
        }
        case Op::kProd: {
          if (prod_grad_ == ProdGrad::kStable) {
            for (int64_t j = b; j < e; ++j) dx[j] = dy[j];
            for (size_t o = 0; o < k; ++o) {
              if (o == i) continue;
              const float* x = bottom[o]->data.data<float>();
              for (int64_t j = b; j < e; ++j) dx[j] *= x[j];
            }
          } else {
            // The values are read only here: SUM and MAX declare that backward reads none.
            const float* x = bottom[i]->data.data<float>();
            const float* y = top[0]->data.data<float>();
            for (int64_t j = b; j < e; ++j) dx[j] = dy[j] * y[j] / x[j];
          }
          break;
        }
        case Op::kMax: {
          const int32_t* arg = argmax_.data<int32_t>();
          const int32_t me = static_cast<int32_t>(i);
          for (int64_t j = b; j < e; ++j) dx[j] = arg[j] == me ? dy[j] : 0.0f;
          break;
        }
      }
    });
  }
}

void EltwiseLayer::forward_stored_cpu(const BlobVec& bottom, const BlobVec& top) {
  Tensor& out = top[0]->data;
  for (const Blob* b : bottom) check_same_storage("Eltwise forward", {&out, &b->data});
  const int64_t n = out.numel();
  const size_t k = bottom.size();
  int32_t* arg = op_ == Op::kMax ? argmax_.data<int32_t>() : nullptr;
  with_float_element(out.dtype(), "Eltwise forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    std::vector<const T*> x(k);
    for (size_t i = 0; i < k; ++i) x[i] = bottom[i]->data.data<T>();
    T* y = out.data<T>();
    parallel_for(n, kChunk, [&](int64_t b, int64_t end) {
      for (int64_t j = b; j < end; ++j) {
        float acc = E::load(x[0][j]);
        if (op_ == Op::kSum) acc *= coeffs_[0];
        int32_t won = 0;
        for (size_t i = 1; i < k; ++i) {
          const float v = E::load(x[i][j]);
          if (op_ == Op::kSum) {
            acc += coeffs_[i] * v;
          } else if (op_ == Op::kProd) {
            acc *= v;
          } else if (v > acc) {  // strict: ties go to the earlier bottom
            acc = v;
            won = static_cast<int32_t>(i);
          }
        }
        y[j] = E::store(acc);
        if (arg) arg[j] = won;
      }
    });
  });
}

void EltwiseLayer::backward_stored_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                       const BlobVec& bottom) {
  const Tensor& grad = top[0]->diff;
  const int64_t n = grad.numel();
  const size_t k = bottom.size();
  with_float_element(grad.dtype(), "Eltwise backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* dy = grad.data<T>();
    // The values read: PROD's bottoms (and output), MAX's winners; SUM none.
    std::vector<const T*> x(k, nullptr);
    if (op_ == Op::kProd) {
      for (size_t i = 0; i < k; ++i) x[i] = bottom[i]->data.data<T>();
    }
    const T* y = op_ == Op::kProd && prod_grad_ == ProdGrad::kDivide ? top[0]->data.data<T>() : nullptr;
    const int32_t* arg = op_ == Op::kMax ? argmax_.data<int32_t>() : nullptr;
    for (size_t i = 0; i < k; ++i) {
      if (!propagate_down[i]) continue;
      check_same_storage("Eltwise backward", {&grad, &bottom[i]->diff});
      T* dx = bottom[i]->diff.data<T>();
      const int32_t me = static_cast<int32_t>(i);
      parallel_for(n, kChunk, [&](int64_t b, int64_t end) {
        for (int64_t j = b; j < end; ++j) {
          float g = E::load(dy[j]);
          if (op_ == Op::kSum) {
            g *= coeffs_[i];
          } else if (op_ == Op::kMax) {
            g = arg[j] == me ? g : 0.0f;
          } else if (y == nullptr) {  // PROD, stable: the product of the other bottoms
            for (size_t o = 0; o < k; ++o) {
              if (o != i) g *= E::load(x[o][j]);
            }
          } else {
            g = g * E::load(y[j]) / E::load(x[i][j]);
          }
          dx[j] = E::store(g);
        }
      });
    }
  });
}

STRATA_REGISTER_LAYER("Eltwise", EltwiseLayer);

}  // namespace strata
