#include "layers/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/scratch.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"

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

// Copies a [rows, cols] block with row stride `src_ld` into a dense [rows, cols].
void gather(int64_t rows, int64_t cols, const float* src, int64_t src_ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * cols, src + r * src_ld, sizeof(float) * cols);
}

// The inverse: a dense [rows, cols] into a block with row stride `dst_ld`.
void scatter(int64_t rows, int64_t cols, const float* src, float* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * cols, sizeof(float) * cols);
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
void head_probs(int64_t t, int64_t dh, float scale, const float* q, const float* k, float* p) {
  gemm(Transpose::kNo, Transpose::kYes, t, t, dh, scale, q, k, 0.0f, p);
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
  s.blocks = {{"attention_param", {"num_heads", "bias_term", "weight_filler", "bias_filler", "split"}}};
  s.examples = {
      layer_example("attention_param { num_heads: 2 bias_filler { type: 'gaussian' std: 0.5 } }", {{2, 3, 4}}),
      layer_example("attention_param { num_heads: 1 bias_term: false }", {{2, 4, 3}}),
  };
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

MultiHeadAttentionLayer::CpuScratch MultiHeadAttentionLayer::lay_out_scratch(ScratchCarver& c, bool backward) const {
  CpuScratch s;
  s.items = c.take({item_workers() * scratch_floats_});
  if (backward) {
    const int64_t dl = local_heads() * dh_;
    s.dctx = c.take({n_, t_, dl});
    s.dqkv = c.take({n_, t_, 3 * dl});
  }
  return s;
}

MultiHeadAttentionLayer::GpuScratch MultiHeadAttentionLayer::lay_out_gpu_scratch(ScratchCarver& c,
                                                                                  bool backward) const {
  const int64_t lh = local_heads(), dl = lh * dh_;
  GpuScratch s;
  s.probs = c.take({n_, lh, t_, t_});
  if (!backward) {
    s.qkv = c.take({n_, t_, 3 * dl});
    s.o = c.take({n_, lh, t_, dh_});
    return s;
  }
  s.dctx = c.take({n_, t_, dl});
  s.dout = c.take({n_, lh, t_, dh_});
  s.dp = c.take({n_, lh, t_, t_});
  s.dheads = c.take({3, n_, lh, t_, dh_});
  s.dqkv = c.take({n_, t_, 3 * dl});
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
  k.qkv = c.take({n_, t_, 3 * dl});
  k.ctx = c.take({n_, t_, dl});
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
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl;
  const float* x = bottom[0]->data.data<float>();
  Kept k = take_kept();
  float* qkv = k.qkv.data<float>();
  float* ctx = k.ctx.data<float>();
  CpuScratch cpu = take_scratch(false);
  float* items = cpu.items.data<float>();

  // Input projection of all local heads at once. With every head local the
  // weight rows are [q; k; v] as stored.
  gemm(Transpose::kNo, Transpose::kYes, m, width, d_, 1.0f, x, param(in_w_).data.data<float>(), 0.0f, qkv);
  if (in_b_ >= 0) add_bias(m, width, param(in_b_).data.data<float>(), qkv);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  for_each_item([&](int64_t item, int worker) {
    const int64_t n = item / lh, hl = item % lh;  // hl: local head index
    float* q = items + worker * scratch_floats_;
    float* k = q + T * dh;
    float* v = k + T * dh;
    float* o = v + T * dh;
    float* p = o + 2 * T * dh;  // [T, T]
    const float* base = qkv + n * T * width + hl * dh;
    gather(T, dh, base, width, q);
    gather(T, dh, base + dl, width, k);
    gather(T, dh, base + 2 * dl, width, v);
    head_probs(T, dh, scale, q, k, p);
    gemm(Transpose::kNo, Transpose::kNo, T, dh, T, 1.0f, p, v, 0.0f, o);
    scatter(T, dh, o, ctx + n * T * dl + hl * dh, dl);
  });

  float* y = top[0]->data.data<float>();
  gemm(Transpose::kNo, Transpose::kYes, m, d_, dl, 1.0f, ctx, param(out_w_).data.data<float>(), 0.0f, y);
  if (tp_.active()) tp_.comm->allreduce(top[0]->data, ReduceOp::kSum);  // every rank's heads
  if (out_b_ >= 0) add_bias(m, d_, param(out_b_).data.data<float>(), y);
}

// Per (sample, head), with dO the head's slice of d ctx and P recomputed
// from the kept q and k (head_probs):
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)) * scale,
//   dQ = dS K,  dK = dS^T Q.
void MultiHeadAttentionLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                           const BlobVec& bottom) {
  const int64_t m = n_ * t_, T = t_, dh = dh_, lh = local_heads();
  const int64_t dl = lh * dh, width = 3 * dl;
  const float* dy = top[0]->diff.data<float>();
  const float* x = bottom[0]->data.data<float>();
  const Kept k = take_kept();
  const float* qkv = k.qkv.data<float>();
  const float* ctx = k.ctx.data<float>();
  CpuScratch cpu = take_scratch(true);
  float* items = cpu.items.data<float>();
  float* dctx = cpu.dctx.data<float>();
  float* dqkv = cpu.dqkv.data<float>();

  // Output projection.
  gemm(Transpose::kYes, Transpose::kNo, d_, dl, m, 1.0f, dy, ctx, 1.0f, param(out_w_).diff.data<float>());
  if (out_b_ >= 0) add_column_sums(m, d_, dy, param(out_b_).diff.data<float>());
  gemm(Transpose::kNo, Transpose::kNo, m, dl, d_, 1.0f, dy, param(out_w_).data.data<float>(), 0.0f, dctx);

  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  for_each_item([&](int64_t item, int worker) {
    const int64_t n = item / lh, hl = item % lh;
    float* q = items + worker * scratch_floats_;
    float* k = q + T * dh;
    float* v = k + T * dh;
    float* g = v + T * dh;    // a gradient [T, dh] on its way to dqkv
    float* dout = g + T * dh;
    float* p = dout + T * dh;  // [T, T]
    float* dp = p + T * T;     // [T, T]
    const float* base = qkv + n * T * width + hl * dh;
    float* dbase = dqkv + n * T * width + hl * dh;
    gather(T, dh, base, width, q);
    gather(T, dh, base + dl, width, k);
    gather(T, dh, base + 2 * dl, width, v);
    gather(T, dh, dctx + n * T * dl + hl * dh, dl, dout);
    head_probs(T, dh, scale, q, k, p);

    gemm(Transpose::kYes, Transpose::kNo, T, dh, T, 1.0f, p, dout, 0.0f, g);  // dV
    scatter(T, dh, g, dbase + 2 * dl, width);
    gemm(Transpose::kNo, Transpose::kYes, T, T, dh, 1.0f, dout, v, 0.0f, dp);
    for (int64_t i = 0; i < T; ++i) {
      const float* pr = p + i * T;
      float* dr = dp + i * T;
      double dot = 0.0;
      for (int64_t j = 0; j < T; ++j) dot += static_cast<double>(dr[j]) * pr[j];
      const float d = static_cast<float>(dot);
      for (int64_t j = 0; j < T; ++j) dr[j] = pr[j] * (dr[j] - d) * scale;
    }
    gemm(Transpose::kNo, Transpose::kNo, T, dh, T, 1.0f, dp, k, 0.0f, g);  // dQ
    scatter(T, dh, g, dbase, width);
    gemm(Transpose::kYes, Transpose::kNo, T, dh, T, 1.0f, dp, q, 0.0f, g);  // dK
    scatter(T, dh, g, dbase + dl, width);
  });

  // Input projection.
  gemm(Transpose::kYes, Transpose::kNo, width, d_, m, 1.0f, dqkv, x, 1.0f, param(in_w_).diff.data<float>());
  if (in_b_ >= 0) add_column_sums(m, width, dqkv, param(in_b_).diff.data<float>());
  if (propagate_down[0]) {
    gemm(Transpose::kNo, Transpose::kNo, m, d_, width, 1.0f, dqkv, param(in_w_).data.data<float>(), 0.0f,
         bottom[0]->diff.data<float>());
    if (tp_.active()) tp_.comm->allreduce(bottom[0]->diff, ReduceOp::kSum);  // every rank's heads
  }
}

ParamShard MultiHeadAttentionLayer::param_shard(size_t param_index) const {
  const int i = static_cast<int>(param_index);
  if (i == in_w_ || i == in_b_) return shard_of(tp_, 0, 3);  // q, k and v rows of this rank's heads
  if (i == out_w_) return shard_of(tp_, 1);
  return {};
}

STRATA_REGISTER_LAYER("MultiHeadAttention", MultiHeadAttentionLayer);

}  // namespace strata
