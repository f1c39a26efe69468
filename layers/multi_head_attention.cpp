#include "layers/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/scratch.h"
#include "framework/cpu/gemm_bf16.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element), check_same_storage
#ifdef STRATA_WITH_CUDA
#include "layers/multi_head_attention_flash.h"
#endif

namespace strata {
namespace {

int64_t rows_chunk(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, width)); }

// y[m, :] += b for every row of y [rows, width].
void add_bias(int64_t rows, int64_t width, const float* b, float* y) {
  parallel_for(rows, rows_chunk(width), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = y + i * width;
      for (int64_t j = 0; j < width; ++j) row[j] += b[j];
    }
  });
}

// db += column sums of dy [rows, width]; threads own column ranges.
void add_column_sums(int64_t rows, int64_t width, const float* dy, float* db) {
  parallel_for(width, std::max<int64_t>(16, 16384 / std::max<int64_t>(1, rows)), [&](int64_t jb, int64_t je) {
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = dy + i * width;
      for (int64_t j = jb; j < je; ++j) db[j] += row[j];
    }
  });
}

// Copies a [rows, cols] block with row stride `src_ld` into a dense f32
// [rows, cols], widening 16-bit elements (E: framework/cpu's element forms).
template <class E>
void gather(int64_t rows, int64_t cols, const typename E::T* src, int64_t src_ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const typename E::T* s = src + r * src_ld;
    float* d = dst + r * cols;
    if constexpr (E::kIsF32) {
      std::memcpy(d, s, sizeof(float) * cols);
    } else {
      for (int64_t j = 0; j < cols; ++j) d[j] = E::load(s[j]);
    }
  }
}

// The inverse: a dense f32 [rows, cols] into a block with row stride
// `dst_ld`, each element rounded once to E's type.
template <class E>
void scatter(int64_t rows, int64_t cols, const float* src, typename E::T* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * cols;
    typename E::T* d = dst + r * dst_ld;
    if constexpr (E::kIsF32) {
      std::memcpy(d, s, sizeof(float) * cols);
    } else {
      for (int64_t j = 0; j < cols; ++j) d[j] = E::store(s[j]);
    }
  }
}

// x[0, n) rounded to E's type and widened again (nothing in f32): a tensor
// that the GPU stores in the blobs' dtype between two products, the same
// value here.
template <class E>
void round_in_place(int64_t n, float* x) {
  if constexpr (!E::kIsF32) {
    for (int64_t i = 0; i < n; ++i) x[i] = E::load(E::store(x[i]));
  }
}

// Row-wise softmax of s [rows, cols] in place, max-subtracted.
void softmax_rows(int64_t rows, int64_t cols, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * cols;
    float mx = row[0];
    for (int64_t j = 1; j < cols; ++j) mx = std::max(mx, row[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
  }
}

// One head's probabilities p [T, T] = softmax(scale q k^T): forward's, and
// backward's again from the kept q and k (the same calls on the same values,
// so the same bits; keeping them instead would cost N * heads * T * T floats
// per layer from forward to backward).
// One head's product C = alpha op(A) op(B) (dense, C's row stride its width).
// `amx`: bf16 blobs where the CPU has AMX. Every operand then holds values
// rounded to bf16 (the kept q, k, v; P, dS and the context's gradient, rounded
// at the 16-bit path's points), so packing them into tiles is exact and only
// the order of the f32 sums changes.
void head_gemm(bool amx, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               const float* b, float* c) {
  if (amx) {
    gemm_bf16(ta, tb, m, n, k, alpha, a, DType::kF32, b, DType::kF32, 0.0f, c, n);
  } else {
    gemm(ta, tb, m, n, k, alpha, a, b, 0.0f, c);
  }
}

void head_probs(bool amx, int64_t t, int64_t dh, float scale, const float* q, const float* k, float* p) {
  head_gemm(amx, Transpose::kNo, Transpose::kYes, t, t, dh, scale, q, k, p);
  softmax_rows(t, t, p);
}

}  // namespace

MultiHeadAttentionLayer::MultiHeadAttentionLayer(const LayerSpec& spec, const LayerContext& ctx)
    : Layer(spec, ctx) {
  const ConfigNode& p = block("attention_param");
  num_heads_ = p.get_int("num_heads");
  if (num_heads_ <= 0) {
    fail<ConfigError>("attention_param of ", where(), " at ", p.loc().str(), ": num_heads must be > 0, got ",
                      num_heads_);
  }
  bias_ = p.get_bool("bias_term", true) ? Bias::kYes : Bias::kNo;
  fused_requested_ = p.get_bool("fused", true);
  if (p.get_enum("split", {"NONE", "HEADS"}, "NONE") == "HEADS") tp_ = tp_group(ctx.comm);
  weight_filler_ = parse_filler(p.block("weight_filler"), default_weight_filler(), "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

ForwardCost MultiHeadAttentionLayer::forward_cost(const BlobVec& bottom, const BlobVec& top) const {
  ForwardCost c = Layer::forward_cost(bottom, top);
  const Shape& out = top[0]->shape();
  if (out.size() == 3) {
    c.flops += 4 * static_cast<double>(out[0]) * static_cast<double>(out[1]) * static_cast<double>(out[1]) *
               static_cast<double>(out[2]);
  }
  return c;
}

LayerSchema MultiHeadAttentionLayer::schema() {
  LayerSchema s;
  s.work = LayerWork::kWeights;
  s.summary = "Multi-head scaled dot-product self-attention on [N, T, D] tokens "
              "(PyTorch MultiheadAttention, batch_first, no mask)";
  s.blocks = {{"attention_param", {"num_heads", "bias_term", "weight_filler", "bias_filler", "split", "fused"}}};
  s.examples = {
      layer_example("attention_param { num_heads: 2 bias_filler { type: 'gaussian' std: 0.5 } }", {{2, 3, 4}}),
      layer_example("attention_param { num_heads: 1 bias_term: false }", {{2, 4, 3}}),
  };
  // With 16-bit blobs, the longest chain of roundings: forward q k v, P,
  // the context, y; backward d ctx, dS, dK (or dQ), dx, after q k v.
  s.storage_roundings = 5;
  return s;
}

void MultiHeadAttentionLayer::check_bottom(const Shape& s) const {
  if (s.size() != 3) {
    shape_error("expected a bottom of tokens [N, T, D], got " + shape_str(s) +
                "; put a PatchEmbed (or a Reshape) before attention");
  }
}

void MultiHeadAttentionLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  d_ = s[2];
  if (d_ <= 0 || d_ % num_heads_ != 0) {
    shape_error("expected an embedding dim D divisible by num_heads " + std::to_string(num_heads_) +
                ", got bottom " + shape_str(s) + "; pick num_heads dividing " + std::to_string(d_));
  }
  dh_ = d_ / num_heads_;
  fused_why_not_ = "not on a GPU";
#ifdef STRATA_WITH_CUDA
  if (!device().is_cpu()) {
    fused_why_not_ = fused_requested_ ? flash_attention::unavailable(dh_, device().index) : "fused: false";
  }
#endif
  if (num_heads_ % tp_.size != 0) {
    shape_error("split: HEADS over " + std::to_string(tp_.size) + " tensor-parallel ranks needs num_heads (" +
                std::to_string(num_heads_) + ") divisible by " + std::to_string(tp_.size) +
                "; change num_heads or the tensor { size }");
  }
  const int64_t dl = local_heads() * dh_;  // d_ unless split by heads
  int index = 0;
  Blob& in_w = add_param("in_proj_weight", {3 * dl, d_});
  in_w_ = index++;
  fill_shard(weight_filler_, in_w.data, param_shard(in_w_), rng_);
  if (bias_ == Bias::kYes) {
    Blob& in_b = add_param("in_proj_bias", {3 * dl});
    in_b_ = index++;
    fill_shard(bias_filler_, in_b.data, param_shard(in_b_), rng_);
  }
  Blob& out_w = add_param("out_proj_weight", {d_, dl});
  out_w_ = index++;
  fill_shard(weight_filler_, out_w.data, param_shard(out_w_), rng_);
  if (bias_ == Bias::kYes) {
    Blob& out_b = add_param("out_proj_bias", {d_});
    fill(bias_filler_, out_b.data, rng_);
    out_b_ = index++;
  }
}

void MultiHeadAttentionLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  if (s[2] != d_) {
    shape_error("expected embedding dim " + std::to_string(d_) + " (as at setup), got bottom " + shape_str(s) +
                "; the projections are fixed at setup");
  }
  n_ = s[0];
  t_ = s[1];
  top[0]->resize({n_, t_, d_});
  // q, k, v, o (or a gradient), d o: [T, dh] each; P and (backward) dP: [T, T] each.
  scratch_floats_ = 5 * t_ * dh_ + 2 * t_ * t_;
}

int64_t MultiHeadAttentionLayer::item_workers() const { return std::max(1, num_threads()); }

int64_t MultiHeadAttentionLayer::block_rows() const {
  const int64_t m = n_ * t_;
  if (call_dtype() == DType::kF32) return m;
  constexpr int64_t kWideFloats = int64_t{1} << 20;  // 4 MiB for wide_b
  return std::max<int64_t>(1, std::min(m, kWideFloats / std::max<int64_t>(1, 3 * d_)));
}

MultiHeadAttentionLayer::CpuScratch MultiHeadAttentionLayer::lay_out_scratch(ScratchCarver& c, bool backward) const {
  CpuScratch s;
  s.items = c.take({item_workers() * scratch_floats_});
  if (backward) {
    const int64_t dl = local_heads() * dh_;
    s.dctx = c.take({n_, t_, dl});
    s.dqkv = c.take({n_, t_, 3 * dl});
  }
  if (call_dtype() != DType::kF32) {
    s.wide_a = c.take({block_rows(), d_});
    s.wide_b = c.take({block_rows(), 3 * d_});
  }
  return s;
}

bool MultiHeadAttentionLayer::fused() const {
  return !device().is_cpu() && call_dtype() != DType::kF32 && fused_why_not_.empty();
}

MultiHeadAttentionLayer::GpuScratch MultiHeadAttentionLayer::lay_out_gpu_scratch(ScratchCarver& c,
                                                                                  bool backward) const {
  const int64_t lh = local_heads(), dl = lh * dh_;
  const DType st = call_dtype();
  const bool scores = !fused();  // the unfused path's [N, H, T, T] tensors
  GpuScratch s;
  if (scores) {
    s.probs = c.take({n_, lh, t_, t_});
    if (st != DType::kF32) s.probs_stored = c.take({n_, lh, t_, t_}, st);
  }
  if (!backward) {
    s.qkv = c.take({n_, t_, 3 * dl}, st);
    s.o = c.take({n_, lh, t_, dh_}, st);
    return s;
  }
  s.dctx = c.take({n_, t_, dl}, st);
  s.dout = c.take({n_, lh, t_, dh_}, st);
  if (scores) {
    s.dp = c.take({n_, lh, t_, t_});
  } else {
    s.row_dots = c.take({n_, lh, t_});
  }
  s.dheads = c.take({3, n_, lh, t_, dh_}, st);
  s.dqkv = c.take({n_, t_, 3 * dl}, st);
  return s;
}

MultiHeadAttentionLayer::GpuScratch MultiHeadAttentionLayer::take_gpu_scratch(bool backward) {
  ScratchCarver counter;
  lay_out_gpu_scratch(counter, backward);
  ScratchCarver carver(scratch(counter.bytes()));
  return lay_out_gpu_scratch(carver, backward);
}

MultiHeadAttentionLayer::Kept MultiHeadAttentionLayer::lay_out_kept(ScratchCarver& c) const {
  const int64_t dl = local_heads() * dh_;
  Kept k;
  k.qkv = c.take({n_, t_, 3 * dl}, call_dtype());
  k.ctx = c.take({n_, t_, dl}, call_dtype());
  if (!device().is_cpu() && call_dtype() != DType::kF32) {
    k.w_in = c.take({3 * dl, d_}, call_dtype());
    k.w_out = c.take({d_, dl}, call_dtype());
  }
  if (fused()) k.lse = c.take({n_, local_heads(), t_});
  return k;
}

size_t MultiHeadAttentionLayer::kept_bytes() const {
  ScratchCarver counter;
  lay_out_kept(counter);
  return counter.bytes();
}

MultiHeadAttentionLayer::CpuScratch MultiHeadAttentionLayer::take_scratch(bool backward) {
  ScratchCarver counter;
  lay_out_scratch(counter, backward);
  ScratchCarver carver(scratch(counter.bytes()));
  return lay_out_scratch(carver, backward);
}

MultiHeadAttentionLayer::Kept MultiHeadAttentionLayer::take_kept() {
  ScratchCarver carver(kept(kept_bytes()));
  return lay_out_kept(carver);
}

size_t MultiHeadAttentionLayer::scratch_bytes() const {
  ScratchCarver counter;
  if (!device().is_cpu()) {
    lay_out_gpu_scratch(counter, false);
    size_t most = counter.bytes();
    if (phase() == Phase::kTrain) {
      ScratchCarver backward;
      lay_out_gpu_scratch(backward, true);
      most = std::max(most, backward.bytes());
    }
    return most;
  }
  lay_out_scratch(counter, phase() == Phase::kTrain);
  return counter.bytes();
}

template <typename Body>
void MultiHeadAttentionLayer::for_each_item(const Body& body) {
  const int64_t items = n_ * local_heads();
  // gemm() runs on the calling thread inside a parallel region on every CPU
  // path (framework/cpu/math.h), so the items run side by side (as in
  // ConvolutionLayer). Tiny items (tests, short sequences) are not worth
  // waking the threads for.
  const int64_t flops_per_item = 4 * t_ * t_ * dh_ + 1;
  const int64_t min_chunk = std::max<int64_t>(1, 1000000 / flops_per_item);
  const int64_t workers = item_workers();
  parallel_for(items, min_chunk, [&](int64_t begin, int64_t end) {
    const int worker = worker_index();
    STRATA_CHECK(worker < workers, "worker ", worker, " beyond the ", workers, " scratch slots");
    for (int64_t item = begin; item < end; ++item) body(item, worker);
  });
}

void MultiHeadAttentionLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("MultiHeadAttention forward", {&xt, &yt});
  // f32, or bf16/f16: rows widened in blocks, q k v and the context kept rounded, y rounded once.
  with_float_element(xt.dtype(), "MultiHeadAttention forward", [&](auto e) { forward_cpu_as<decltype(e)>(xt, yt); });
}

template <class E>
void MultiHeadAttentionLayer::forward_cpu_as(const Tensor& xt, Tensor& yt) {
  using T = typename E::T;
  const int64_t m = n_ * t_, T_ = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, rows = block_rows();
  const T* x = xt.data<T>();
  T* y = yt.data<T>();
  Kept k = take_kept();
  T* qkv = k.qkv.data<T>();
  T* ctx = k.ctx.data<T>();
  CpuScratch cpu = take_scratch(false);
  float* items = cpu.items.data<float>();
  float* wide_a = E::kIsF32 ? nullptr : cpu.wide_a.data<float>();
  float* wide_b = E::kIsF32 ? nullptr : cpu.wide_b.data<float>();

  // Input projection of all local heads at once, a block of rows at a time
  // (f32: one block, the blobs themselves). With every head local the
  // weight rows are [q; k; v] as stored.
  // bf16 blobs where the CPU has AMX: the projections multiply the rows as
  // stored against the weights rounded to bf16 as the GEMM packs them (as
  // autocast does), summing in f32; the weight gradients likewise (the f32
  // gradient of q, k, v rounded), and the input gradients against the weights
  // rounded to bf16, as the GPU multiplies them by its kept 16-bit copies.
  const bool amx = std::is_same_v<E, Bf16Element> && gemm_bf16_available();
  // out [r, n] = rows [r0, r0 + r) of src [*, k] times w^T (w: an f32 weight [n, k]).
  const auto project = [&](const T* src, int64_t r0, int64_t r, int64_t k, const float* w, int64_t n, float* out,
                           float* wide) {
    if (amx) {
      gemm_bf16(Transpose::kNo, Transpose::kYes, r, n, k, 1.0f, src + r0 * k, DType::kBF16, w, DType::kF32, 0.0f, out,
                n);
    } else {
      gemm(Transpose::kNo, Transpose::kYes, r, n, k, 1.0f, rows_as_f32<E>(src, r0, r, k, wide), w, 0.0f, out);
    }
  };
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    float* qb = rows_out_f32<E>(qkv, r0, width, wide_b);
    project(x, r0, r, d_, param(in_w_).data.data<float>(), width, qb, wide_a);
    if (in_b_ >= 0) add_bias(r, width, param(in_b_).data.data<float>(), qb);
    round_rows<E>(qb, r0, r, width, qkv);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  for_each_item([&](int64_t item, int worker) {
    const int64_t n = item / lh, hl = item % lh;  // hl: local head index
    float* q = items + worker * scratch_floats_;
    float* k = q + T_ * dh;
    float* v = k + T_ * dh;
    float* o = v + T_ * dh;
    float* p = o + 2 * T_ * dh;  // [T, T]
    const T* base = qkv + n * T_ * width + hl * dh;
    gather<E>(T_, dh, base, width, q);
    gather<E>(T_, dh, base + dl, width, k);
    gather<E>(T_, dh, base + 2 * dl, width, v);
    head_probs(amx, T_, dh, scale, q, k, p);
    round_in_place<E>(T_ * T_, p);
    head_gemm(amx, Transpose::kNo, Transpose::kNo, T_, dh, T_, 1.0f, p, v, o);
    scatter<E>(T_, dh, o, ctx + n * T_ * dl + hl * dh, dl);
  });

  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    float* yb = rows_out_f32<E>(y, r0, d_, wide_a);
    project(ctx, r0, r, dl, param(out_w_).data.data<float>(), d_, yb, wide_b);
    if (!tp_.active()) {
      if (out_b_ >= 0) add_bias(r, d_, param(out_b_).data.data<float>(), yb);
      round_rows<E>(yb, r0, r, d_, y);
    }
  }
  if (tp_.active()) {  // f32 only (takes_storage), one block: every rank's heads, then the bias once
    tp_.comm->allreduce(yt, ReduceOp::kSum);
    if (out_b_ >= 0) add_bias(m, d_, param(out_b_).data.data<float>(), yt.data<float>());
  }
}

// Per (sample, head), with dO the head's slice of d ctx and P recomputed
// from the kept q and k (head_probs):
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
//   dQ = scale dS K,  dK = scale dS^T Q
// (with 16-bit blobs P, dV, dS, dQ and dK rounded as the GPU stores them).
void MultiHeadAttentionLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                           const BlobVec& bottom) {
  const Tensor& dyt = top[0]->diff;
  const Tensor& xt = bottom[0]->data;
  check_same_storage("MultiHeadAttention backward", {&dyt, &xt});
  with_float_element(dyt.dtype(), "MultiHeadAttention backward",
                     [&](auto e) { backward_cpu_as<decltype(e)>(dyt, xt, propagate_down[0], bottom[0]->diff); });
}

template <class E>
void MultiHeadAttentionLayer::backward_cpu_as(const Tensor& dyt, const Tensor& xt, bool propagate, Tensor& dxt) {
  using T = typename E::T;
  const int64_t m = n_ * t_, T_ = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl, rows = block_rows();
  const T* dy = dyt.data<T>();
  const T* x = xt.data<T>();
  const Kept k = take_kept();
  const T* qkv = k.qkv.data<T>();
  const T* ctx = k.ctx.data<T>();
  CpuScratch cpu = take_scratch(true);
  float* items = cpu.items.data<float>();
  float* dctx = cpu.dctx.data<float>();
  float* dqkv = cpu.dqkv.data<float>();
  float* wide_a = E::kIsF32 ? nullptr : cpu.wide_a.data<float>();
  float* wide_b = E::kIsF32 ? nullptr : cpu.wide_b.data<float>();

  // Output projection, a block of rows at a time (AMX: see forward_cpu_as).
  const bool amx = std::is_same_v<E, Bf16Element> && gemm_bf16_available();
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    const float* dyb = rows_as_f32<E>(dy, r0, r, d_, wide_a);
    if (amx) {
      gemm_bf16(Transpose::kYes, Transpose::kNo, d_, dl, r, 1.0f, dy + r0 * d_, DType::kBF16, ctx + r0 * dl,
                DType::kBF16, 1.0f, param(out_w_).diff.data<float>(), dl);
    } else {
      gemm(Transpose::kYes, Transpose::kNo, d_, dl, r, 1.0f, dyb, rows_as_f32<E>(ctx, r0, r, dl, wide_b), 1.0f,
           param(out_w_).diff.data<float>());
    }
    if (out_b_ >= 0) add_column_sums(r, d_, dyb, param(out_b_).diff.data<float>());
    // The input gradients against the weight rounded to bf16, as the GPU's kept copy is.
    if (amx) {
      gemm_bf16(Transpose::kNo, Transpose::kNo, r, dl, d_, 1.0f, dy + r0 * d_, DType::kBF16,
                param(out_w_).data.data<float>(), DType::kF32, 0.0f, dctx + r0 * dl, dl);
    } else {
      gemm(Transpose::kNo, Transpose::kNo, r, dl, d_, 1.0f, dyb, param(out_w_).data.data<float>(), 0.0f,
           dctx + r0 * dl);
    }
    round_in_place<E>(r * dl, dctx + r0 * dl);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  for_each_item([&](int64_t item, int worker) {
    const int64_t n = item / lh, hl = item % lh;
    float* q = items + worker * scratch_floats_;
    float* k = q + T_ * dh;
    float* v = k + T_ * dh;
    float* g = v + T_ * dh;    // a gradient [T, dh] on its way to dqkv
    float* dout = g + T_ * dh;
    float* p = dout + T_ * dh;  // [T, T]
    float* dp = p + T_ * T_;    // [T, T]
    const T* base = qkv + n * T_ * width + hl * dh;
    float* dbase = dqkv + n * T_ * width + hl * dh;
    gather<E>(T_, dh, base, width, q);
    gather<E>(T_, dh, base + dl, width, k);
    gather<E>(T_, dh, base + 2 * dl, width, v);
    gather<F32Element>(T_, dh, dctx + n * T_ * dl + hl * dh, dl, dout);
    head_probs(amx, T_, dh, scale, q, k, p);

    // dV from P as forward stored it (16-bit: rounded, in dp until dP
    // lands there); dS from the f32 P.
    const float* p_stored = p;
    if constexpr (!E::kIsF32) {
      std::copy(p, p + T_ * T_, dp);
      round_in_place<E>(T_ * T_, dp);
      p_stored = dp;
    }
    head_gemm(amx, Transpose::kYes, Transpose::kNo, T_, dh, T_, 1.0f, p_stored, dout, g);  // dV
    round_in_place<E>(T_ * dh, g);
    scatter<F32Element>(T_, dh, g, dbase + 2 * dl, width);
    head_gemm(amx, Transpose::kNo, Transpose::kYes, T_, T_, dh, 1.0f, dout, v, dp);
    for (int64_t i = 0; i < T_; ++i) {
      const float* pr = p + i * T_;
      float* dr = dp + i * T_;
      double dot = 0.0;
      for (int64_t j = 0; j < T_; ++j) dot += static_cast<double>(dr[j]) * pr[j];
      const float d = static_cast<float>(dot);
      for (int64_t j = 0; j < T_; ++j) dr[j] = pr[j] * (dr[j] - d);
    }
    round_in_place<E>(T_ * T_, dp);  // dS
    head_gemm(amx, Transpose::kNo, Transpose::kNo, T_, dh, T_, scale, dp, k, g);  // dQ
    round_in_place<E>(T_ * dh, g);
    scatter<F32Element>(T_, dh, g, dbase, width);
    head_gemm(amx, Transpose::kYes, Transpose::kNo, T_, dh, T_, scale, dp, q, g);  // dK
    round_in_place<E>(T_ * dh, g);
    scatter<F32Element>(T_, dh, g, dbase + dl, width);
  });

  // Input projection, a block of rows at a time.
  if (in_b_ >= 0) add_column_sums(m, width, dqkv, param(in_b_).diff.data<float>());
  if (propagate) check_same_storage("MultiHeadAttention backward", {&dyt, &dxt});
  T* dx = propagate ? dxt.data<T>() : nullptr;
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    if (amx) {
      gemm_bf16(Transpose::kYes, Transpose::kNo, width, d_, r, 1.0f, dqkv + r0 * width, DType::kF32, x + r0 * d_,
                DType::kBF16, 1.0f, param(in_w_).diff.data<float>(), d_);
    } else {
      gemm(Transpose::kYes, Transpose::kNo, width, d_, r, 1.0f, dqkv + r0 * width, rows_as_f32<E>(x, r0, r, d_, wide_a),
           1.0f, param(in_w_).diff.data<float>());
    }
    if (!propagate) continue;
    float* dxb = rows_out_f32<E>(dx, r0, d_, wide_b);
    if (amx) {  // dqkv holds bf16 values (rounded above): packing them is exact
      gemm_bf16(Transpose::kNo, Transpose::kNo, r, d_, width, 1.0f, dqkv + r0 * width, DType::kF32,
                param(in_w_).data.data<float>(), DType::kF32, 0.0f, dxb, d_);
    } else {
      gemm(Transpose::kNo, Transpose::kNo, r, d_, width, 1.0f, dqkv + r0 * width, param(in_w_).data.data<float>(),
           0.0f, dxb);
    }
    round_rows<E>(dxb, r0, r, d_, dx);
  }
  if (propagate && tp_.active()) tp_.comm->allreduce(dxt, ReduceOp::kSum);  // f32 only: every rank's heads
}

ParamShard MultiHeadAttentionLayer::param_shard(size_t param_index) const {
  const int i = static_cast<int>(param_index);
  if (i == in_w_ || i == in_b_) return shard_of(tp_, 0, 3);  // q, k and v rows of this rank's heads
  if (i == out_w_) return shard_of(tp_, 1);
  return {};
}

STRATA_REGISTER_LAYER("MultiHeadAttention", MultiHeadAttentionLayer);

}  // namespace strata
