#include "layers/convolution/convolution.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/scratch.h"
#include "framework/cpu/math.h"
#include "framework/cpu/threads.h"
#include "layers/convolution/convolution_patches.h"
#include "layers/convolution/convolution_winograd.h"
#include "layers/epilogue.h"

namespace strata {

namespace {

// A chunk aims at this many GEMM columns (images x output pixels): narrower
// GEMMs lose speed to packing and edge tiles.
constexpr int64_t kTargetColumns = 512;
// Upper bound on one worker's im2col buffer (floats; the patch path has none).
constexpr int64_t kMaxColumnFloats = int64_t{4} << 20;  // 16 MiB

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

std::string hw_str(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

ConvolutionLayer::Algorithm g_forced_algorithm = ConvolutionLayer::Algorithm::kAuto;

enum class Need { kRequired, kOptional };

// Reads a spatial pair given as `key` (1 value for both dims, or 2 for h, w)
// or as prefix_h / prefix_w.
struct PairReader {
  const ConfigNode& p;
  std::string context;

  void read(const std::string& key, const std::string& prefix, int64_t def, int64_t min, int64_t* h,
            int64_t* w, Need need) const {
    const bool required = need == Need::kRequired;
    const std::string kh = prefix + "_h";
    const std::string kw = prefix + "_w";
    const std::vector<int64_t> v = p.get_ints(key);
    const bool has_hw = p.has(kh) || p.has(kw);
    if (!v.empty() && has_hw) {
      fail<ConfigError>(context, " at ", p.loc().str(), ": give either ", key, " or ", kh, "/", kw,
                        ", not both");
    }
    if (has_hw) {
      if (required && !(p.has(kh) && p.has(kw))) {
        fail<ConfigError>(context, " at ", p.loc().str(), ": ", kh, " and ", kw, " must be given together");
      }
      *h = p.get_int(kh, def);
      *w = p.get_int(kw, def);
    } else if (v.size() == 1) {
      *h = *w = v[0];
    } else if (v.size() == 2) {
      *h = v[0];
      *w = v[1];
    } else if (v.empty()) {
      if (required) {
        fail<ConfigError>(context, " at ", p.loc().str(), ": missing ", key, " (or ", kh, " and ", kw, ")");
      }
      *h = *w = def;
    } else {
      fail<ConfigError>(context, " at ", p.loc().str(), ": ", key,
                        " takes 1 value (both dims) or 2 (h, w) for a 2-D convolution, got ", v.size());
    }
    if (*h < min || *w < min) {
      fail<ConfigError>(context, " at ", p.loc().str(), ": ", key, " must be >= ", min, ", got ",
                        hw_str(*h, *w));
    }
  }
};

}  // namespace

ConvolutionLayer::ConvolutionLayer(const LayerSpec& spec, const LayerContext& ctx) : Layer(spec, ctx) {
  const ConfigNode& p = block("convolution_param");
  const std::string context = "convolution_param of " + where();
  num_output_ = p.get_int("num_output");
  if (num_output_ <= 0) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": num_output must be > 0, got ", num_output_);
  }
  const PairReader r{p, context};
  r.read("kernel_size", "kernel", 0, 1, &kernel_.h, &kernel_.w, Need::kRequired);
  r.read("stride", "stride", 1, 1, &stride_.h, &stride_.w, Need::kOptional);
  r.read("pad", "pad", 0, 0, &pad_.h, &pad_.w, Need::kOptional);
  const std::vector<int64_t> dil = p.get_ints("dilation");
  if (dil.size() > 2) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": dilation takes 1 value or 2 (h, w), got ", dil.size());
  }
  dilation_.h = dil.empty() ? 1 : dil[0];
  dilation_.w = dil.empty() ? 1 : dil.back();
  if (dilation_.h < 1 || dilation_.w < 1) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": dilation must be >= 1, got ",
                      hw_str(dilation_.h, dilation_.w));
  }
  group_ = p.get_int("group", 1);
  if (group_ < 1) fail<ConfigError>(context, " at ", p.loc().str(), ": group must be >= 1, got ", group_);
  if (num_output_ % group_ != 0) {
    fail<ConfigError>(context, " at ", p.loc().str(), ": num_output ", num_output_,
                      " is not divisible by group ", group_, "; make num_output a multiple of group");
  }
  bias_ = p.get_bool("bias_term", true) ? Bias::kYes : Bias::kNo;
  full_output_ = num_output_;
  if (p.get_enum("split", {"NONE", "OUTPUT_CHANNELS"}, "NONE") == "OUTPUT_CHANNELS") {
    tp_ = tp_group(ctx.comm);
    if (tp_.active() && group_ != 1) {
      fail<ConfigError>(context, " at ", p.loc().str(), ": split: OUTPUT_CHANNELS works with group: 1 only, got group ",
                        group_);
    }
  }
  p.get_enum("engine", {"DEFAULT", "CAFFE", "CUDNN"}, "DEFAULT");  // accepted for Caffe files; one engine here
  weight_filler_ = parse_filler(p.block("weight_filler"), default_weight_filler(), "weight_filler of " + where());
  bias_filler_ = parse_filler(p.block("bias_filler"), FillerSpec{}, "bias_filler of " + where());
}

LayerSchema ConvolutionLayer::schema() {
  LayerSchema s;
  s.work = LayerWork::kWeights;
  s.summary = "2-D convolution on NCHW input (kernel/stride/pad/dilation per dim, groups; PyTorch Conv2d)";
  s.blocks = {{"convolution_param",
               {"num_output", "kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w", "pad",
                "pad_h", "pad_w", "dilation", "group", "bias_term", "weight_filler", "bias_filler",
                "engine", "split"}}};
  // Convolution is bilinear in input and weights: central differences are
  // exact up to float rounding, so Gaussian inputs and the default step do.
  s.examples = {
      layer_example("convolution_param { num_output: 4 kernel_size: 3 bias_filler { type: 'gaussian' } }",
              {{2, 3, 5, 5}}),
      layer_example("convolution_param { num_output: 3 kernel_h: 3 kernel_w: 2 stride: 2 pad: 1 }", {{2, 2, 6, 5}}),
      layer_example("convolution_param { num_output: 4 kernel_size: 2 group: 2 dilation: 2 pad_h: 1 pad_w: 0 "
              "stride_h: 1 stride_w: 2 }",
              {{2, 4, 5, 6}}),
      layer_example("convolution_param { num_output: 2 kernel_size: 1 bias_term: false }", {{2, 3, 3, 4}}),
      layer_example("convolution_param { num_output: 2 kernel_size: 3 pad: 1 engine: CAFFE }", {{3, 1, 4, 4}}),
      // Without a tensor-parallel group the split key leaves an ordinary layer.
      layer_example("convolution_param { num_output: 2 kernel_size: 3 split: OUTPUT_CHANNELS }", {{2, 2, 4, 4}}),
  };
  return s;
}

bool ConvolutionLayer::is_pointwise() const {
  return kernel_.h == 1 && kernel_.w == 1 && stride_.h == 1 && stride_.w == 1 && pad_.h == 0 && pad_.w == 0;
}

void ConvolutionLayer::check_bottom(const Shape& s) const {
  if (s.size() != 4) {
    shape_error("expected a 4-D NCHW bottom [N, C, H, W], got " + shape_str(s) +
                "; Convolution works on 2-D images only (add a Reshape layer for other inputs)");
  }
}

ConvolutionLayer::Hw ConvolutionLayer::output_size(const Shape& s) const {
  const int64_t ext_h = dilation_.h * (kernel_.h - 1) + 1;
  const int64_t ext_w = dilation_.w * (kernel_.w - 1) + 1;
  const Hw out{floor_div(s[2] + 2 * pad_.h - ext_h, stride_.h) + 1, floor_div(s[3] + 2 * pad_.w - ext_w, stride_.w) + 1};
  if (out.h < 1 || out.w < 1) {
    shape_error("input " + shape_str(s) + " with kernel " + hw_str(kernel_.h, kernel_.w) + " (dilation " +
                hw_str(dilation_.h, dilation_.w) + "), pad " + hw_str(pad_.h, pad_.w) + " and stride " +
                hw_str(stride_.h, stride_.w) + " gives an output of " + hw_str(out.h, out.w) +
                "; the kernel (" + hw_str(ext_h, ext_w) + " with dilation) must fit in the padded input (" +
                hw_str(s[2] + 2 * pad_.h, s[3] + 2 * pad_.w) + "): use a smaller kernel_size or dilation, or more pad");
  }
  return out;
}

void ConvolutionLayer::setup(const BlobVec& bottom, const BlobVec& /*top*/) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  output_size(s);  // before the weights are made: a kernel larger than the image would size them
  channels_ = s[1];
  if (channels_ % group_ != 0) {
    shape_error("input channels " + std::to_string(channels_) + " (bottom " + shape_str(s) +
                ") are not divisible by group " + std::to_string(group_) +
                "; group must divide both the input channels and num_output");
  }
  if (tp_.active()) {
    if (full_output_ % tp_.size != 0) {
      shape_error("split: OUTPUT_CHANNELS over " + std::to_string(tp_.size) +
                  " tensor-parallel ranks needs num_output (" + std::to_string(full_output_) + ") divisible by " +
                  std::to_string(tp_.size) + "; change num_output or the tensor { size }");
    }
    num_output_ = full_output_ / tp_.size;
  }
  Blob& w = add_param("weight", {num_output_, channels_ / group_, kernel_.h, kernel_.w});
  fill_shard(weight_filler_, w.data, param_shard(0), rng_);
  if (bias_ == Bias::kYes) {
    Blob& b = add_param("bias", {num_output_});
    fill_shard(bias_filler_, b.data, param_shard(1), rng_);
  }
}

ParamShard ConvolutionLayer::param_shard(size_t /*param_index*/) const { return shard_of(tp_, 0); }

void ConvolutionLayer::reshape(const BlobVec& bottom, const BlobVec& top) {
  const Shape& s = bottom[0]->shape();
  check_bottom(s);
  if (s[1] != channels_) {
    shape_error("expected " + std::to_string(channels_) + " input channels (as at setup), got bottom " +
                shape_str(s) + "; the weight shape is fixed at setup");
  }
  num_ = s[0];
  height_ = s[2];
  width_ = s[3];
  const Hw out = output_size(s);
  out_h_ = out.h;
  out_w_ = out.w;
  top[0]->resize({num_, full_output_, out_h_, out_w_});
  if (tp_.active()) local_top_.resize({num_, num_output_, out_h_, out_w_});

  // Chunking: enough images per chunk for a wide GEMM, a bounded column
  // buffer, and a whole number of chunks per thread.
  const int64_t hw = out_h_ * out_w_;
  const int64_t col_rows = channels_ * kernel_.h * kernel_.w;
  int64_t n_img = (kTargetColumns + hw - 1) / hw;
  const int64_t by_memory = kMaxColumnFloats / (col_rows * hw > 0 ? col_rows * hw : 1);
  if (n_img > by_memory) n_img = by_memory;
  if (n_img < 1) n_img = 1;
  if (use_winograd()) n_img = winograd_chunk_images();
  const int64_t threads = num_threads();
  if (num_ > 0) {
    int64_t chunks = (num_ + n_img - 1) / n_img;
    // One chunk runs its GEMMs on every thread, but Winograd's transforms on
    // one: give every thread a chunk of its own.
    if (use_winograd() && chunks < threads) chunks = threads < num_ ? threads : num_;
    if (chunks > 1 && threads > 1) chunks = (chunks + threads - 1) / threads * threads;
    n_img = (num_ + chunks - 1) / chunks;
    if (n_img < 1) n_img = 1;
  }
  chunk_images_ = n_img;
  num_chunks_ = num_ > 0 ? (num_ + n_img - 1) / n_img : 0;
#ifdef STRATA_WITH_CUDA
  // The algorithms come with the shape, so scratch_bytes() names their workspace.
  if (!device().is_cpu() && num_ > 0) prepare_cudnn();
#endif
}

void ConvolutionLayer::force_algorithm_for_testing(Algorithm a) { g_forced_algorithm = a; }

bool ConvolutionLayer::use_patches() const {
#ifdef STRATA_CONV_PATCHES
  return g_forced_algorithm != Algorithm::kIm2col && conv_patches::use_avx512() && !use_bf16_tiles();
#else
  return false;
#endif
}

bool ConvolutionLayer::use_winograd() const {
  const bool shape = kernel_.h == 3 && kernel_.w == 3 && stride_.h == 1 && stride_.w == 1 && dilation_.h == 1 &&
                     dilation_.w == 1;
  if (!shape || g_forced_algorithm == Algorithm::kIm2col) return false;
  if (g_forced_algorithm == Algorithm::kWinograd) return true;
  // With few channels the 16 GEMMs are too thin to pay for the transforms
  // (a first layer on RGB keeps its patch or im2col path).
  return winograd::vector_transforms() && channels_ / group_ >= 16 && num_output_ / group_ >= 16;
}

bool ConvolutionLayer::input_grad_as_convolution() const {
  // That convolution packs num_output * kh * kw patch rows per input pixel
  // for only channels / group output rows; with few input channels (a first
  // layer) col2im over channels * kh * kw rows is cheaper.
  return use_patches() && stride_.h == 1 && stride_.w == 1 && 2 * channels_ >= num_output_;
}

size_t ConvolutionLayer::kept_bytes() const {
  if (!stored_path() || device().is_cpu()) return 0;
  ScratchCarver counter;
  counter.take(param(0).shape(), call_dtype());
  return counter.bytes();
}

size_t ConvolutionLayer::scratch_bytes() const {
  if (!device().is_cpu()) {
#ifdef STRATA_WITH_CUDA
    ScratchCarver counter;  // cuDNN's workspace, after the 16-bit weight gradient
    lay_out_cuda_scratch(counter, cudnn_workspace_bytes(), phase() == Phase::kTrain);  // TEST: forward's
    return counter.bytes();
#else
    return 0;
#endif
  }
  ScratchCarver counter;
  lay_out_workspaces(counter);
  return counter.bytes();
}

std::vector<ConvolutionLayer::Workspace> ConvolutionLayer::prepare_workspaces() {
  ScratchCarver carver(scratch(scratch_bytes()));
  return lay_out_workspaces(carver);
}

std::vector<ConvolutionLayer::Workspace> ConvolutionLayer::lay_out_workspaces(ScratchCarver& c) const {
  // One workspace per worker, for the thread count now.
  const int64_t threads = num_threads();
  const int64_t workers = num_chunks_ < threads ? (num_chunks_ > 0 ? num_chunks_ : 1) : threads;
  std::vector<Workspace> out(static_cast<size_t>(workers));
  const int64_t wsize = num_output_ * (channels_ / group_) * kernel_.h * kernel_.w;
  Workspace filters;
  if (input_grad_as_convolution() || use_winograd()) filters.flipped = c.take({wsize});
  if (use_winograd()) {
    filters.wino_u = c.take({wsize / 9 * winograd::kPoints});
    filters.wino_u_flipped = c.take({wsize / 9 * winograd::kPoints});
  }
  if (use_bf16_tiles()) {
    filters.w_hi = c.take({wsize}, DType::kBF16);
    filters.w_lo = c.take({wsize}, DType::kBF16);
  }
  for (size_t t = 0; t < out.size(); ++t) {
    Workspace& ws = out[t];
    ws.flipped = filters.flipped;
    ws.wino_u = filters.wino_u;
    ws.wino_u_flipped = filters.wino_u_flipped;
    ws.w_hi = filters.w_hi;
    ws.w_lo = filters.w_lo;
    if (t > 0) {  // backward's private weight- and bias-gradient sums (worker 0 adds into the parameters)
      ws.dw = c.take({wsize});
      if (bias_ == Bias::kYes) ws.db = c.take({num_output_});
    }
    if (stored_path()) {
      const int64_t image = channels_ * height_ * width_;
      ws.wide_x = c.take({chunk_images_ * image});
      ws.wide_y = c.take({chunk_images_ * num_output_ * out_h_ * out_w_});
      ws.wide_dx = c.take({chunk_images_ * image});
    }
    if (use_winograd()) {
      lay_out_winograd_workspace(c, ws);
      continue;
    }
    const int64_t n_img = chunk_images_;
    const int64_t cols = n_img * out_h_ * out_w_;
    const int64_t col_rows = channels_ * kernel_.h * kernel_.w;
    // Column buffer: im2col columns, or (patch path) the input gradient of a
    // chunk before it is scattered to the images.
    int64_t col_floats = 0;
    if (!use_patches()) {
      if (!(is_pointwise() && n_img == 1)) col_floats = col_rows * cols;
    } else if (!input_grad_as_convolution()) {
      col_floats = col_rows * cols;
    } else if (n_img > 1) {
      col_floats = channels_ * n_img * height_ * width_;
    }
    // Zero-padded copies of a chunk's input images (patch path), or of its top
    // gradient for the input-gradient convolution.
    int64_t padded_floats = 0;
    if (use_patches()) {
      padded_floats = n_img * channels_ * (height_ + 2 * pad_.h) * (width_ + 2 * pad_.w);
      if (input_grad_as_convolution()) {
        const int64_t gh = out_h_ + 2 * (dilation_.h * (kernel_.h - 1) - pad_.h);
        const int64_t gw = out_w_ + 2 * (dilation_.w * (kernel_.w - 1) - pad_.w);
        const int64_t grad_floats = n_img * num_output_ * gh * gw;
        if (grad_floats > padded_floats) padded_floats = grad_floats;
      }
    }
    if (col_floats > 0) ws.col = c.take({col_floats});
    if (n_img > 1) ws.out = c.take({num_output_, cols});
    if (padded_floats > 0) ws.padded = c.take({padded_floats});
  }
  return out;
}

void ConvolutionLayer::for_each_chunk(const ChunkBody& body) const {
  const int64_t n_img = chunk_images_;
  const int64_t num = num_;
  // gemm() runs on the calling thread inside a parallel region on every CPU
  // path (framework/cpu/math.h), so the chunks (im2col, GEMM, col2im) run side by side.
  parallel_for(num_chunks_, 1, [&](int64_t begin, int64_t end) {
    const int worker = worker_index();
    for (int64_t c = begin; c < end; ++c) {
      const int64_t i0 = c * n_img;
      const int64_t n = i0 + n_img <= num ? n_img : num - i0;
      body(i0, n, worker);
    }
  });
}

void ConvolutionLayer::fill_columns(const float* x, int64_t i0, int64_t n, Workspace& ws) const {
  const int64_t hw = out_h_ * out_w_;
  const int64_t cols = n * hw;
  const int64_t image = channels_ * height_ * width_;
  float* col = ws.col.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + (i0 + i) * image;
    if (is_pointwise()) {
      for (int64_t c = 0; c < channels_; ++c) {
        std::memcpy(col + c * cols + i * hw, xi + c * hw, sizeof(float) * hw);
      }
    } else {
      im2col(xi, channels_, height_, width_, kernel_.h, kernel_.w, pad_.h, pad_.w, stride_.h, stride_.w,
             dilation_.h, dilation_.w, col + i * hw, cols);
    }
  }
}

void ConvolutionLayer::forward_chunk(const float* x, float* y, int64_t i0, int64_t n, Workspace& ws) const {
  if (use_winograd()) {
    winograd_forward_chunk(x, y, i0, n, ws);
    return;
  }
  const int64_t hw = out_h_ * out_w_;
  const int64_t cols = n * hw;
  const int64_t out_g = num_output_ / group_;
  const int64_t rows_g = channels_ / group_ * kernel_.h * kernel_.w;
  const float* w = param(0).data.data<float>();
  float* out = n == 1 ? y + i0 * num_output_ * hw : ws.out.data<float>();
  if (is_pointwise() && n == 1) {
    // The image itself is the [C, H * W] patch matrix.
    const float* xi = x + i0 * channels_ * height_ * width_;
    for (int64_t g = 0; g < group_; ++g) {
      multiply_weight(Transpose::kNo, Transpose::kNo, out_g, cols, rows_g, g * out_g * rows_g,
                      xi + g * rows_g * cols, 0.0f, out + g * out_g * cols, ws);
    }
  } else if (use_patches()) {
    for (int64_t g = 0; g < group_; ++g) {
      multiply_patches(input_patches(x, i0, n, g, ws), Orientation::kPixelColumns, out_g, cols, rows_g,
                       w + g * out_g * rows_g, 0.0f, out + g * out_g * cols, cols);
    }
  } else {
    fill_columns(x, i0, n, ws);
    const float* col = ws.col.data<float>();
    for (int64_t g = 0; g < group_; ++g) {
      multiply_weight(Transpose::kNo, Transpose::kNo, out_g, cols, rows_g, g * out_g * rows_g,
                      col + g * rows_g * cols, 0.0f, out + g * out_g * cols, ws);
    }
  }
  const float* b = bias_ == Bias::kYes ? param(1).data.data<float>() : nullptr;
  if (n == 1) {
    if (b) {
      for (int64_t o = 0; o < num_output_; ++o) {
        float* row = out + o * hw;
        const float bo = b[o];
        for (int64_t j = 0; j < hw; ++j) row[j] += bo;
      }
    }
    return;
  }
  // Scatter [num_output, n * hw] back to NCHW, adding the bias on the way.
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < num_output_; ++o) {
      const float* src = out + o * cols + i * hw;
      float* dst = y + ((i0 + i) * num_output_ + o) * hw;
      const float bo = b ? b[o] : 0.0f;
      for (int64_t j = 0; j < hw; ++j) dst[j] = src[j] + bo;
    }
  }
}

void ConvolutionLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  if (!tp_.active()) {
    forward_local(bottom, top);
    return;
  }
  forward_local(bottom, {&local_top_});
  allgather_blocks(tp_, local_top_.data, top[0]->shape(), 1, gathered_, top[0]->data);
}

void ConvolutionLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                    const BlobVec& bottom) {
  if (!tp_.active()) {
    backward_local(top, propagate_down, bottom);
    return;
  }
  copy_block_out(top[0]->diff.data<float>(), top[0]->shape(), 1, tp_.size, tp_.rank,
                 local_top_.diff.data<float>());
  backward_local({&local_top_}, propagate_down, bottom);
  // Every rank's channels depend on all input channels: sum their gradients.
  if (propagate_down[0]) tp_.comm->allreduce(bottom[0]->diff, ReduceOp::kSum);
}

void ConvolutionLayer::forward_local(const BlobVec& bottom, const BlobVec& top) {
  std::vector<Workspace> workspaces = prepare_workspaces();
  if (use_winograd()) {
    winograd_transform_filters(param(0).data.data<float>(), num_output_ / group_, channels_ / group_,
                               workspaces[0].wino_u);
  }
  if (use_bf16_tiles()) split_weight_for_tiles(workspaces[0]);
  if (stored_path() || bottom[0]->data.dtype() != DType::kF32) {
    check_call_dtype({&bottom[0]->data, &top[0]->data});  // the workspaces follow it
    return forward_stored(bottom[0]->data, top[0]->data, workspaces);
  }
  const float* x = bottom[0]->data.data<float>();
  float* y = top[0]->data.data<float>();
  const int64_t out_image = num_output_ * out_h_ * out_w_;
  for_each_chunk([&](int64_t i0, int64_t n, int worker) {
    forward_chunk(x, y, i0, n, workspaces[static_cast<size_t>(worker)]);
    apply_epilogue(epilogue(), y + i0 * out_image, n * out_image);  // a fused ReLU, while the chunk is in cache
  });
}

void ConvolutionLayer::flip_weights(Tensor& flipped) const {
  // W'[g][c][o][kh-1-ki][kw-1-kj] = W[g * out_g + o][c][ki][kj]: the kernel
  // of the convolution of the top gradient that gives the input gradient.
  const int64_t out_g = num_output_ / group_;
  const int64_t ch_g = channels_ / group_;
  const int64_t taps = kernel_.h * kernel_.w;
  const float* w = param(0).data.data<float>();
  float* f = flipped.data<float>();
  parallel_for(num_output_, 16, [&](int64_t begin, int64_t end) {
    for (int64_t go = begin; go < end; ++go) {
      const int64_t g = go / out_g;
      const int64_t o = go % out_g;
      for (int64_t c = 0; c < ch_g; ++c) {
        const float* src = w + (go * ch_g + c) * taps;
        float* dst = f + ((g * ch_g + c) * out_g + o) * taps;
        for (int64_t t = 0; t < taps; ++t) dst[taps - 1 - t] = src[t];
      }
    }
  });
}

void ConvolutionLayer::backward_chunk(const float* x, const float* dy, float* dx, int64_t i0, int64_t n,
                                      float* dw, float* db, float dw_beta, Workspace& ws) const {
  if (use_winograd()) {
    winograd_backward_chunk(x, dy, dx, i0, n, dw, db, dw_beta, ws);
    return;
  }
  const int64_t hw = out_h_ * out_w_;
  const int64_t cols = n * hw;
  const int64_t out_g = num_output_ / group_;
  const int64_t ch_g = channels_ / group_;
  const int64_t rows_g = ch_g * kernel_.h * kernel_.w;
  const int64_t image = channels_ * height_ * width_;

  // Top gradient of the chunk as [num_output, cols].
  const float* g_out;
  if (n == 1) {
    g_out = dy + i0 * num_output_ * hw;
  } else {
    float* buf = ws.out.data<float>();
    for (int64_t o = 0; o < num_output_; ++o) {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(buf + o * cols + i * hw, dy + ((i0 + i) * num_output_ + o) * hw, sizeof(float) * hw);
      }
    }
    g_out = buf;
  }
  if (db) {
    for (int64_t o = 0; o < num_output_; ++o) {
      const float s = conv_patches::row_sum(g_out + o * cols, cols);
      db[o] = dw_beta == 0.0f ? s : db[o] + s;
    }
  }

  // Weight gradient: dW_g += dY_g * patches_g^T.
  const bool direct = is_pointwise() && n == 1;
  const bool patches = use_patches() && !direct;
  if (patches) {
    for (int64_t g = 0; g < group_; ++g) {
      multiply_patches(input_patches(x, i0, n, g, ws), Orientation::kPixelRows, out_g, rows_g, cols,
                       g_out + g * out_g * cols, dw_beta, dw + g * out_g * rows_g, rows_g);
    }
  } else {
    if (!direct) fill_columns(x, i0, n, ws);
    const float* col = direct ? x + i0 * image : ws.col.data<float>();
    for (int64_t g = 0; g < group_; ++g) {
      multiply_data(Transpose::kNo, Transpose::kYes, out_g, rows_g, cols, g_out + g * out_g * cols,
                    col + g * rows_g * cols, dw_beta, dw + g * out_g * rows_g);
    }
  }
  if (!dx) return;

  if (direct) {
    // dX_i = W^T dY_i straight into the image.
    for (int64_t g = 0; g < group_; ++g) {
      multiply_weight(Transpose::kYes, Transpose::kNo, rows_g, cols, out_g, g * out_g * rows_g,
                      g_out + g * out_g * cols, 0.0f, dx + i0 * image + g * rows_g * cols, ws);
    }
    return;
  }
  if (input_grad_as_convolution()) {
    // Stride 1: dX is the convolution of dY with the flipped kernel (pad
    // dilation * (kernel - 1) - pad), so it is one more patch GEMM, writing
    // each input pixel once (no col2im, no zero fill).
    const int64_t in_hw = height_ * width_;
    const int64_t in_cols = n * in_hw;
    float* dst = n == 1 ? dx + i0 * image : ws.col.data<float>();
    const float* f = ws.flipped.data<float>();
    const int64_t taps = kernel_.h * kernel_.w;
    const Hw gpad{dilation_.h * (kernel_.h - 1) - pad_.h, dilation_.w * (kernel_.w - 1) - pad_.w};
    const int64_t hp = out_h_ + 2 * gpad.h;
    const int64_t wp = out_w_ + 2 * gpad.w;
    float* padded = ws.padded.data<float>();
    pad_images(dy, i0, n, num_output_, out_h_, out_w_, gpad, padded);
    for (int64_t g = 0; g < group_; ++g) {
      const Patches grad{padded + g * out_g * hp * wp, num_output_ * hp * wp, hp * wp, wp, height_, width_,
                         kernel_, Hw{1, 1}, dilation_};
      multiply_patches(grad, Orientation::kPixelColumns, ch_g, in_cols, out_g * taps, f + g * ch_g * out_g * taps,
                       0.0f, dst + g * ch_g * in_cols, in_cols);
    }
    if (n > 1) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < channels_; ++c) {
          std::memcpy(dx + (i0 + i) * image + c * in_hw, dst + c * in_cols + i * in_hw, sizeof(float) * in_hw);
        }
      }
    }
    return;
  }
  // Otherwise: column gradient col_g = W_g^T * dY_g, folded back by col2im.
  float* dcol = ws.col.data<float>();
  for (int64_t g = 0; g < group_; ++g) {
    multiply_weight(Transpose::kYes, Transpose::kNo, rows_g, cols, out_g, g * out_g * rows_g,
                    g_out + g * out_g * cols, 0.0f, dcol + g * rows_g * cols, ws);
  }
  for (int64_t i = 0; i < n; ++i) {
    float* dxi = dx + (i0 + i) * image;
    if (is_pointwise()) {
      for (int64_t c = 0; c < channels_; ++c) {
        std::memcpy(dxi + c * hw, dcol + c * cols + i * hw, sizeof(float) * hw);
      }
    } else {
      std::memset(dxi, 0, sizeof(float) * image);
      col2im(dcol + i * hw, cols, channels_, height_, width_, kernel_.h, kernel_.w, pad_.h, pad_.w,
             stride_.h, stride_.w, dilation_.h, dilation_.w, dxi);
    }
  }
}

void ConvolutionLayer::backward_local(const BlobVec& top, const std::vector<bool>& propagate_down,
                                      const BlobVec& bottom) {
  if (num_chunks_ == 0) return;
  std::vector<Workspace> workspaces = prepare_workspaces();
  const bool want_dx = propagate_down[0];
  if (want_dx && use_bf16_tiles()) split_weight_for_tiles(workspaces[0]);
  if (want_dx && (input_grad_as_convolution() || use_winograd())) flip_weights(workspaces[0].flipped);
  if (want_dx && use_winograd()) {
    winograd_transform_filters(workspaces[0].flipped.data<float>(), channels_ / group_, num_output_ / group_,
                               workspaces[0].wino_u_flipped);
  }
  Blob& wblob = param(0);
  float* bias_diff = bias_ == Bias::kYes ? param(1).diff.data<float>() : nullptr;
  const int64_t wsize = wblob.numel();
  // Worker 0 accumulates straight into the parameter gradients; the others
  // into private buffers (their first chunk overwrites), summed at the end.
  std::vector<char> used(workspaces.size(), 0);
  auto chunk = [&](const float* x, const float* dy, float* dx, int64_t i0, int64_t n, int worker) {
    Workspace& ws = workspaces[static_cast<size_t>(worker)];
    if (worker == 0) {
      backward_chunk(x, dy, dx, i0, n, wblob.diff.data<float>(), bias_diff, 1.0f, ws);
    } else {
      backward_chunk(x, dy, dx, i0, n, ws.dw.data<float>(), bias_diff ? ws.db.data<float>() : nullptr,
                     used[worker] ? 1.0f : 0.0f, ws);
    }
    used[worker] = 1;
  };
  const DType st = call_dtype();
  check_call_dtype({&top[0]->diff, &bottom[0]->data});  // the workspaces follow it
  if (want_dx) check_call_dtype({&bottom[0]->diff});
  if (st == DType::kF32 && call_layout() == Layout::kNCHW) {
    const float* x = bottom[0]->data.data<float>();
    const float* dy = top[0]->diff.data<float>();
    float* dx = want_dx ? bottom[0]->diff.data<float>() : nullptr;
    for_each_chunk([&](int64_t i0, int64_t n, int worker) { chunk(x, dy, dx, i0, n, worker); });
  } else {
    backward_stored(bottom[0]->data, top[0]->diff, want_dx ? &bottom[0]->diff : nullptr, workspaces, chunk);
  }
  float* dw = wblob.diff.data<float>();
  for (size_t t = 1; t < workspaces.size(); ++t) {
    if (!used[t]) continue;
    const float* part = workspaces[t].dw.data<float>();
    parallel_for(wsize, 32768, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dw[i] += part[i];
    });
    if (bias_diff) axpy(num_output_, 1.0f, workspaces[t].db.data<float>(), bias_diff);
  }
}

STRATA_REGISTER_LAYER("Convolution", ConvolutionLayer);

}  // namespace strata
