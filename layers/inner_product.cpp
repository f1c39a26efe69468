#include "layers/inner_product.h"

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/filler.h"
#include "framework/layer_registry.h"
#include "framework/cpu/gemm_bf16.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"
#include "framework/scratch.h"
#include "layers/epilogue.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

InnerProductLayer::InnerProductLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx) {
  const ConfigNode& p = block("inner_product_param");
  num_output_ = p.get_int("num_output");
  if (num_output_ <= 0) {
    fail<ConfigError>("inner_product_param of ", where(), " at ", p.loc().str(),
                      ": num_output must be > 0, got ", num_output_);
  }
  full_output_ = num_output_;
  bias_ = p.get_bool("bias_term", true) ? Bias::kYes : Bias::kNo;
  const std::string split = p.get_enum("split", {"NONE", "COLUMN", "ROW"}, "NONE");
  split_ = split == "COLUMN" ? Split::kColumn : split == "ROW" ? Split::kRow : Split::kNone;
  if (split_ != Split::kNone) tp_ = tp_group(ctx.comm);
  if (!tp_.active()) split_ = Split::kNone;  // a world of one: an ordinary layer
  axis_ = static_cast<int>(p.get_int("axis", 1));
  layout_ = p.get_bool("transpose", false) ? WeightLayout::kInputMajor : WeightLayout::kOutputMajor;
  weight_filler_ = parse_filler(p.block("weight_filler"), default_weight_filler(), "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

LayerSchema InnerProductLayer::schema() {
  LayerSchema s;
  s.work = LayerWork::kWeights;
  s.summary = "Fully connected layer y = x W^T + b over the dims from `axis` on (PyTorch Linear)";
  s.blocks = {{"inner_product_param",
               {"num_output", "bias_term", "weight_filler", "bias_filler", "axis", "transpose", "split"}}};
  // A linear map: central differences are exact up to float rounding.
  s.examples = {
      layer_example("inner_product_param { num_output: 4 bias_filler { type: 'gaussian' } }", {{2, 3, 2, 2}}),
      layer_example("inner_product_param { num_output: 3 axis: 2 }", {{2, 3, 4}}),
      layer_example("inner_product_param { num_output: 3 axis: -1 transpose: true bias_term: false }",
              {{2, 2, 5}}),
      // Without a tensor-parallel group the split keys leave an ordinary layer.
      layer_example("inner_product_param { num_output: 4 split: COLUMN }", {{2, 3}}),
  };
  return s;
}

int InnerProductLayer::canonical_axis(const Shape& s) const {
  const int ndim = static_cast<int>(s.size());
  const int axis = axis_ < 0 ? axis_ + ndim : axis_;
  if (axis < 0 || axis >= ndim) {
    shape_error("inner_product_param axis " + std::to_string(axis_) + " is out of range for the " +
                std::to_string(ndim) + "-D bottom " + shape_str(s) + "; use an axis in [" +
                std::to_string(-ndim) + ", " + std::to_string(ndim - 1) + "]");
  }
  return axis;
}

void InnerProductLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  const int axis = canonical_axis(s);
  k_ = bottom[0]->data.count(axis);
  if (split_ == Split::kColumn) {
    if (full_output_ % tp_.size != 0) {
      shape_error("split: COLUMN over " + std::to_string(tp_.size) + " tensor-parallel ranks needs num_output (" +
                  std::to_string(full_output_) + ") divisible by " + std::to_string(tp_.size) +
                  "; change num_output or the tensor { size }");
    }
    num_output_ = full_output_ / tp_.size;
  }
  const Shape wshape = layout_ == WeightLayout::kOutputMajor ? Shape{num_output_, k_} : Shape{k_, num_output_};
  Blob& w = add_param("weight", wshape);
  fill_shard(weight_filler_, w.data, param_shard(0), rng_);
  if (bias_ == Bias::kYes) {
    Blob& b = add_param("bias", {num_output_});
    fill_shard(bias_filler_, b.data, param_shard(1), rng_);
  }
}

ParamShard InnerProductLayer::param_shard(size_t param_index) const {
  const int out_axis = layout_ == WeightLayout::kOutputMajor ? 0 : 1;
  switch (split_) {
    case Split::kColumn:
      return shard_of(tp_, param_index == 0 ? out_axis : 0);
    case Split::kRow:
      return param_index == 0 ? shard_of(tp_, 1 - out_axis) : ParamShard{};
    case Split::kNone:
      break;
  }
  return {};
}

void InnerProductLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  const int axis = canonical_axis(s);
  const int64_t k = bottom[0]->data.count(axis);
  if (k != k_) {
    shape_error("expected " + std::to_string(k_) + " inputs per sample (the product of the bottom dims from axis " +
                std::to_string(axis) + ", as at setup), got bottom " + shape_str(s) + " with " +
                std::to_string(k) + "; the weight is fixed at setup, so keep the per-sample shape constant");
  }
  m_ = bottom[0]->data.count(0, axis);
  Shape out(s.begin(), s.begin() + axis);
  out.push_back(num_output_);
  top[0]->resize(out);
}

void InnerProductLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  if (call_dtype() != DType::kF32 || bottom[0]->data.dtype() != DType::kF32) {
    check_call_dtype({&bottom[0]->data, &top[0]->data});  // the scratch follows it
    return forward_stored_cpu(bottom[0]->data, top[0]->data);
  }
  const float* x = bottom[0]->data.data<float>();
  const float* w = param(0).data.data<float>();
  float* y = top[0]->data.data<float>();
  const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kYes : Transpose::kNo;
  gemm(Transpose::kNo, tw, m_, num_output_, k_, 1.0f, x, w, 0.0f, y);
  // ROW: each rank multiplied its slice of the inputs; the sum is the output.
  if (split_ == Split::kRow) tp_.comm->allreduce(top[0]->data, ReduceOp::kSum);
  add_bias_and_epilogue(m_, y);
}

void InnerProductLayer::add_bias_and_epilogue(int64_t rows, float* y) const {
  const float* b = bias_ == Bias::kYes ? param(1).data.data<float>() : nullptr;
  const Epilogue& e = epilogue();
  if (!b && e.none()) return;
  const int64_t n = num_output_;
  parallel_for(rows, 1 + 16384 / n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = y + i * n;
      if (b) {
        for (int64_t j = 0; j < n; ++j) row[j] += b[j];
      }
      apply_epilogue(e, row, n);  // a fused ReLU on the row while it is in cache
    }
  });
}

void InnerProductLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                     const BlobVec& bottom) {
  if (call_dtype() != DType::kF32 || top[0]->diff.dtype() != DType::kF32) {
    check_call_dtype({&top[0]->diff, &bottom[0]->data, &bottom[0]->diff});
    return backward_stored_cpu(top[0]->diff, bottom[0]->data, propagate_down[0] ? &bottom[0]->diff : nullptr);
  }
  const float* dy = top[0]->diff.data<float>();
  const float* x = bottom[0]->data.data<float>();
  const float* w = param(0).data.data<float>();
  float* dw = param(0).diff.data<float>();
  if (layout_ == WeightLayout::kOutputMajor) {
    gemm(Transpose::kYes, Transpose::kNo, num_output_, k_, m_, 1.0f, dy, x, 1.0f, dw);
  } else {
    gemm(Transpose::kYes, Transpose::kNo, k_, num_output_, m_, 1.0f, x, dy, 1.0f, dw);
  }
  if (bias_ == Bias::kYes) {
    float* db = param(1).diff.data<float>();
    const int64_t n = num_output_;
    for (int64_t i = 0; i < m_; ++i) {
      const float* row = dy + i * n;
      for (int64_t j = 0; j < n; ++j) db[j] += row[j];
    }
  }
  if (propagate_down[0]) {
    float* dx = bottom[0]->diff.data<float>();
    const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kNo : Transpose::kYes;
    gemm(Transpose::kNo, tw, m_, k_, num_output_, 1.0f, dy, w, 0.0f, dx);
    // COLUMN: each rank's outputs depend on all inputs; sum their gradients.
    if (split_ == Split::kColumn) tp_.comm->allreduce(bottom[0]->diff, ReduceOp::kSum);
  }
}

namespace {

// The f32 scratch of one block of rows, at most (unless one row needs more).
constexpr int64_t kStoredBlockBytes = int64_t{8} << 20;

}  // namespace

int64_t InnerProductLayer::stored_block_rows() const {
  // Per row: the input and the input gradient [K], the output or its gradient [N].
  const int64_t per_row = static_cast<int64_t>(sizeof(float)) * (2 * k_ + num_output_);
  const int64_t rows = kStoredBlockBytes / per_row;
  return rows < 1 ? 1 : (rows < m_ ? rows : (m_ > 0 ? m_ : 1));
}

size_t InnerProductLayer::scratch_bytes() const {
  if (call_dtype() == DType::kF32 || !device().is_cpu()) return 0;
  ScratchCarver counter;
  const int64_t rows = stored_block_rows();
  counter.take({rows, k_});
  counter.take({rows, num_output_});
  counter.take({rows, k_});
  return counter.bytes();
}

size_t InnerProductLayer::kept_bytes() const {
  if (call_dtype() == DType::kF32 || device().is_cpu()) return 0;
  ScratchCarver counter;
  counter.take(param(0).shape(), call_dtype());  // the weight in the blobs' dtype
  return counter.bytes();
}

void InnerProductLayer::forward_stored_cpu(const Tensor& x, Tensor& y) {
  const int64_t rows = stored_block_rows();
  ScratchCarver carver(scratch(scratch_bytes()));
  Tensor xb = carver.take({rows, k_});
  Tensor yb = carver.take({rows, num_output_});
  const float* w = param(0).data.data<float>();
  const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kYes : Transpose::kNo;
  const int64_t n = num_output_;
  const bool bf16_gemm = x.dtype() == DType::kBF16 && gemm_bf16_available();
  with_float_element(x.dtype(), "InnerProduct forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    for (int64_t r0 = 0; r0 < m_; r0 += rows) {
      const int64_t r = r0 + rows <= m_ ? rows : m_ - r0;
      float* yf = yb.data<float>();
      if (bf16_gemm) {
        // The bf16 rows as they are, the weight rounded to bf16 as it is packed.
        gemm_bf16(Transpose::kNo, tw, r, n, k_, 1.0f, x.data<T>() + r0 * k_, DType::kBF16, w, DType::kF32, 0.0f, yf,
                  n);
      } else {
        widen_elements<E>(x.data<T>() + r0 * k_, r * k_, xb.data<float>());
        gemm(Transpose::kNo, tw, r, n, k_, 1.0f, xb.data<float>(), w, 0.0f, yf);
      }
      add_bias_and_epilogue(r, yf);
      round_elements<E>(yf, r * n, y.data<T>() + r0 * n);
    }
  });
}

void InnerProductLayer::backward_stored_cpu(const Tensor& dy, const Tensor& x, Tensor* dx) {
  const int64_t rows = stored_block_rows();
  ScratchCarver carver(scratch(scratch_bytes()));
  Tensor xb = carver.take({rows, k_});
  Tensor dyb = carver.take({rows, num_output_});
  Tensor dxb = carver.take({rows, k_});
  const float* w = param(0).data.data<float>();
  float* dw = param(0).diff.data<float>();
  float* db = bias_ == Bias::kYes ? param(1).diff.data<float>() : nullptr;
  const int64_t n = num_output_;
  const bool bf16_gemm = dy.dtype() == DType::kBF16 && gemm_bf16_available();
  with_float_element(dy.dtype(), "InnerProduct backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    for (int64_t r0 = 0; r0 < m_; r0 += rows) {
      const int64_t r = r0 + rows <= m_ ? rows : m_ - r0;
      const T* dy16 = dy.data<T>() + r0 * n;
      const T* x16 = x.data<T>() + r0 * k_;
      widen_elements<E>(dy16, r * n, dyb.data<float>());
      const float* g = dyb.data<float>();
      // The parameter gradients accumulate block by block, in f32.
      if (bf16_gemm) {
        // Both operands bf16 as stored: exact products, f32 sums.
        if (layout_ == WeightLayout::kOutputMajor) {
          gemm_bf16(Transpose::kYes, Transpose::kNo, n, k_, r, 1.0f, dy16, DType::kBF16, x16, DType::kBF16, 1.0f, dw,
                    k_);
        } else {
          gemm_bf16(Transpose::kYes, Transpose::kNo, k_, n, r, 1.0f, x16, DType::kBF16, dy16, DType::kBF16, 1.0f, dw,
                    n);
        }
      } else {
        widen_elements<E>(x16, r * k_, xb.data<float>());
        if (layout_ == WeightLayout::kOutputMajor) {
          gemm(Transpose::kYes, Transpose::kNo, n, k_, r, 1.0f, g, xb.data<float>(), 1.0f, dw);
        } else {
          gemm(Transpose::kYes, Transpose::kNo, k_, n, r, 1.0f, xb.data<float>(), g, 1.0f, dw);
        }
      }
      if (db) {
        for (int64_t i = 0; i < r; ++i) {
          for (int64_t j = 0; j < n; ++j) db[j] += g[i * n + j];
        }
      }
      if (dx) {
        const Transpose tw = layout_ == WeightLayout::kOutputMajor ? Transpose::kNo : Transpose::kYes;
        if (bf16_gemm) {
          gemm_bf16(Transpose::kNo, tw, r, k_, n, 1.0f, dy16, DType::kBF16, w, DType::kF32, 0.0f, dxb.data<float>(),
                    k_);
        } else {
          gemm(Transpose::kNo, tw, r, k_, n, 1.0f, g, w, 0.0f, dxb.data<float>());
        }
        round_elements<E>(dxb.data<float>(), r * k_, dx->data<T>() + r0 * k_);
      }
    }
  });
}

STRATA_REGISTER_LAYER("InnerProduct", InnerProductLayer);

}  // namespace strata
