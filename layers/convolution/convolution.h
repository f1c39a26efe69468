// Convolution (Caffe "Convolution", PyTorch Conv2d) on NCHW images: weight
// [num_output, channels / group, kernel_h, kernel_w], bias [num_output].
//
// Speed: images are processed in chunks so that one large GEMM per group
// covers several images (small images would otherwise give GEMMs too narrow
// to run near peak). On AVX-512 and AVX2 CPUs, 3x3 stride-1 undilated
// convolutions with 16 or more channels per group run as Winograd F(2x2, 3x3)
// (layers/convolution/convolution_winograd_path.cpp: 2.25x fewer
// multiplications, which put the 8x8 and 16x16 layers of cifar_vgg ahead of a
// direct convolution at the FMA peak; its transforms are vectorised for both).
// On AVX-512 CPUs the GEMMs of the other convolutions read the image patches
// straight from the images (gemm_pack_b; no column buffer), and the input
// gradient of a stride-1 convolution is the convolution of the top gradient
// with the flipped kernel. Elsewhere each chunk is unrolled by im2col into one
// column buffer [C * kh * kw, n_img * out_h * out_w] (col2im for the input gradient).
// Chunks run in parallel, one per thread, each with its own scratch and (in
// backward) its own weight-gradient accumulator; 1x1 stride-1 unpadded
// convolutions of single images read the image directly.
//
// Tensor parallel (`split: OUTPUT_CHANNELS` with a tensor-parallel
// communicator of T ranks; without one the layer is ordinary): rank r holds
// output channels [r*C/T, (r+1)*C/T) of the weight and bias, computes them,
// and the ranks allgather the full top along C. Backward takes this rank's
// channels of the top gradient and allreduces the input gradient.
#pragma once

#include <functional>
#include <vector>

#include "framework/cpu/math.h"  // Transpose
#include "framework/filler.h"
#include "framework/scratch.h"
#include "framework/layer.h"
#include "framework/tensor_parallel.h"

namespace strata {

class ConvolutionLayer : public Layer {
 public:
  // kAuto: Winograd F(2x2, 3x3) for 3x3 stride-1 undilated convolutions with
  // enough channels where the CPU has AVX2 or AVX-512, patch packing for the
  // others where it has AVX-512; im2col elsewhere. kIm2col forces the portable im2col path;
  // kWinograd forces Winograd wherever the shape allows it (any CPU, any
  // channel count) and patch packing or im2col for the rest (for tests of
  // every path on one machine).
  enum class Algorithm { kAuto, kIm2col, kWinograd };

  ConvolutionLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // The weight gradient reads the input; nothing reads the output.
  BackwardReads backward_reads() const override { return {true, false}; }
  // Blobs stored in bf16 or f16 are taken as they are (not with split: the
  // gathered channels are f32). On the CPU each chunk of images is widened
  // into its worker's f32 scratch, convolved as in f32 and rounded once, so
  // the f32 copies span one chunk, not the batch. On a GPU cuDNN convolves
  // the 16-bit tensors on tensor cores (f32 accumulation) with a 16-bit copy
  // of the weight that the forward makes and keeps for the backward (one
  // rounding per step, not per call); the weight gradient comes out in 16 bits
  // and is added to the f32 one, as under autocast.
  bool takes_storage(DType dtype) const override {
    return dtype == DType::kF32 || (is_float_dtype(dtype) && !tp_.active());
  }
  static void force_algorithm_for_testing(Algorithm a);

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  // Every worker's im2col or Winograd buffers and weight-gradient sums.
  size_t scratch_bytes() const override;
  // A ReLU after it applied to each chunk of images as it is written: on
  // the CPU; on a GPU in the bias kernel, so with a bias.
  bool takes_epilogue(const Epilogue& e) const override {
    return e.kind == Epilogue::Kind::kReLU && !tp_.active() && (device().is_cpu() || bias_ == Bias::kYes);
  }
  // Channels-last (NHWC) blobs, faster on tensor cores: a net asked to store
  // them (NetOptions::channels_last) grows them from here. On a GPU cuDNN
  // convolves NHWC with a KRSC copy of the weight that the forward makes
  // and keeps (as the 16-bit copy), its weight gradient turned back to KCRS
  // as it is added; the bias (and a fused ReLU) and the bias gradient run
  // over rows of channels. On the CPU each chunk of images is gathered into
  // the f32 NCHW scratch of the 16-bit path, so the arithmetic and the bits
  // are NCHW's. Not with split (the gathered channels are NCHW).
  ChannelsLast channels_last() const override { return tp_.active() ? ChannelsLast::kNo : ChannelsLast::kFaster; }
  // Tensor parallel reduces through a communicator the host drives.
  bool replays_in_a_graph() const override { return !tp_.active(); }
  // 16-bit or NHWC blobs on a GPU: the weight's copy in their dtype and
  // layout, from forward to backward.
  size_t kept_bytes() const override;
  ParamShard param_shard(size_t param_index) const override;

 private:
  enum class Bias { kNo, kYes };
  struct Hw {
    int64_t h = 0;
    int64_t w = 0;
  };
  // Per-worker scratch: views of the layer's scratch() for one call
  // (lay_out_workspaces), so nothing in it outlives the call.
  struct Workspace {
    Tensor col;     // im2col: [C * kh * kw, cols] columns, then their gradient;
                    // patch path: a chunk's input gradient before the scatter
    Tensor out;     // [num_output, cols]: output or gathered top gradient of a chunk
    Tensor dw;      // weight-gradient partial sums (workers other than 0)
    Tensor db;      // bias-gradient partial sums (workers other than 0)
    Tensor padded;  // patch path: zero-padded copy of a chunk's images or top gradient
    Tensor wino_v;        // Winograd: transformed input windows [16][channels][tiles]
    Tensor wino_m;        // Winograd: products, or transformed top gradient [16][out][tiles]
    Tensor wino_du;       // Winograd: weight gradient in the transformed domain [16][out][in]
    Tensor wino_scratch;  // Winograd: one zero-padded plane and row sums
    // 16-bit blobs: the chunk's images, its output or top gradient, and its
    // input gradient, in f32.
    Tensor wide_x, wide_y, wide_dx;
    // The call's filters, the same views in every worker's workspace (made
    // once per call, read by all its chunks):
    Tensor flipped;         // weights of the input-gradient convolution (stride 1, patch and Winograd paths)
    Tensor wino_u;          // Winograd: the filters transformed, [group][16][out_g][in_g]
    Tensor wino_u_flipped;  // Winograd: the input-gradient filters transformed, [group][16][in_g][out_g]
    Tensor w_hi, w_lo;      // bf16 tiles: the weight as two bf16 parts, w = hi + lo (to 2^-16)
  };

  // Image patches of a chunk of zero-padded images as a GEMM operand (see
  // gemm_pack_b): pixel j of the output grid, patch row k = (channel, ki, kj).
  struct Patches {
    const float* x;  // first padded image of the chunk, at the group's first channel
    int64_t image_stride, plane, width;  // floats per image, per channel, per row
    int64_t out_h, out_w;
    Hw kernel, stride, dilation;
  };
  // kPixelColumns: B[k][j] (forward); kPixelRows: B[j][k] (weight gradient).
  enum class Orientation { kPixelColumns, kPixelRows };

  // The unsplit computation, into a top of num_output_ channels.
  void forward_local(const BlobVec& bottom, const BlobVec& top);
  // forward_local over 16-bit blobs (convolution_stored_path.cpp).
  void forward_stored(const Tensor& x, Tensor& y, std::vector<Workspace>& workspaces);
  void backward_local(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom);
  void check_bottom(const Shape& s) const;
  // Output height and width for bottom shape `s`; ShapeError when the kernel does not fit.
  Hw output_size(const Shape& s) const;
  // Every worker's workspace, carved from scratch() at the start of a call
  // (held by the call only).
  std::vector<Workspace> prepare_workspaces();
  // The layout, over a block or only counted (scratch_bytes).
  std::vector<Workspace> lay_out_workspaces(ScratchCarver& c) const;
  bool use_patches() const;
  // bf16 calls on a CPU with AMX (layers/convolution/convolution_tiles_path.cpp):
  // where Winograd does not run, the im2col and 1x1 GEMMs multiply on the
  // tiles in place of the patch path. The images and gradients are bf16
  // values already; the weight is split into two bf16 parts, so its
  // products keep f32's accuracy (two tile GEMMs) rather than autocast's.
  bool use_bf16_tiles() const;
  void split_weight_for_tiles(Workspace& filters) const;  // w_hi, w_lo of param(0)
  // C[M,N] = op(W_g) op(B) + beta * C with W_g the weight's rows from
  // `w_row` (a group's): on the tiles as hi and lo, or gemm on the f32 weight.
  void multiply_weight(Transpose tw, Transpose tb, int64_t M, int64_t N, int64_t K, int64_t w_offset,
                       const float* B, float beta, float* C, const Workspace& ws) const;
  // C[M,N] = op(A) op(B) + beta * C of two operands that hold bf16 values
  // (images, gradients): on the tiles, else gemm.
  void multiply_data(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
                     float beta, float* C) const;
  // Winograd F(2x2, 3x3) path (layers/convolution/convolution_winograd_path.cpp).
  bool use_winograd() const;
  int64_t winograd_chunk_images() const;
  void lay_out_winograd_workspace(ScratchCarver& c, Workspace& ws) const;
  void winograd_transform_filters(const float* w, int64_t out_g, int64_t in_g, Tensor& u) const;
  void winograd_forward_chunk(const float* x, float* y, int64_t i0, int64_t n, Workspace& ws) const;
  void winograd_backward_chunk(const float* x, const float* dy, float* dx, int64_t i0, int64_t n, float* dw,
                               float* db, float dw_beta, Workspace& ws) const;
  bool input_grad_as_convolution() const;
  static void pad_images(const float* x, int64_t i0, int64_t n, int64_t channels, int64_t height, int64_t width,
                         Hw pad, float* dst);
  // Pads the chunk into ws.padded when g == 0 (call groups in order).
  Patches input_patches(const float* x, int64_t i0, int64_t n, int64_t g, Workspace& ws) const;
  // C[M,N] (row stride ldc) = A[M,K] * B + beta * C, B the patches as `o` says.
  void multiply_patches(const Patches& p, Orientation o, int64_t M, int64_t N, int64_t K, const float* a,
                        float beta, float* c, int64_t ldc) const;
  void flip_weights(Tensor& flipped) const;
  bool is_pointwise() const;
  // Whether a call takes the stored path (16-bit or NHWC blobs): on the CPU
  // each chunk widened into f32 NCHW scratch, on a GPU a copy of the weight
  // in the blobs' dtype and layout.
  bool stored_path() const { return call_dtype() != DType::kF32 || call_layout() == Layout::kNHWC; }
  // Copies (1x1) or unrolls (im2col) images [i0, i0 + n) into ws.col.
  void fill_columns(const float* x, int64_t i0, int64_t n, Workspace& ws) const;
  void forward_chunk(const float* x, float* y, int64_t i0, int64_t n, Workspace& ws) const;
  void backward_chunk(const float* x, const float* dy, float* dx, int64_t i0, int64_t n,
                      float* dw, float* db, float dw_beta, Workspace& ws) const;
  // Runs body(i0, n, worker) over the image chunks; a worker is one thread,
  // so its workspace needs no locking. Called once per chunk.
  using ChunkBody = std::function<void(int64_t i0, int64_t n, int worker)>;
  void for_each_chunk(const ChunkBody& body) const;
  // 16-bit blobs (layers/convolution/convolution_stored_path.cpp): each
  // chunk widened into its worker's f32 scratch (as images 0..n-1), run by
  // the f32 code, its outputs rounded once. backward_stored hands each
  // chunk to `chunk` (backward_chunk with the worker's gradient sums).
  using BackwardChunk =
      std::function<void(const float* x, const float* dy, float* dx, int64_t i0, int64_t n, int worker)>;
  void backward_stored(const Tensor& x, const Tensor& dy, Tensor* dx, std::vector<Workspace>& workspaces,
                       const BackwardChunk& chunk);

  int64_t num_output_;  // this rank's output channels (num_output / T when split)
  int64_t full_output_;
  TpGroup tp_;          // active only with split: OUTPUT_CHANNELS over > 1 rank
  Blob local_top_;      // split: this rank's channels of the top
  Tensor gathered_;     // split: every rank's channels, as allgathered
  Hw kernel_, stride_, pad_, dilation_;
  int64_t group_;
  Bias bias_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;

  // Fixed at setup.
  int64_t channels_ = 0;
  // Current shapes (reshape).
  int64_t num_ = 0, height_ = 0, width_ = 0, out_h_ = 0, out_w_ = 0;
  int64_t chunk_images_ = 1;  // images per chunk
  int64_t num_chunks_ = 0;

#ifdef STRATA_WITH_CUDA
 public:
  STRATA_CUDA_METHODS;
  // The cuDNN algorithms of the current shape and their workspaces.
  std::string describe_runtime() const override;

 private:
  struct CudaState;  // descriptors and chosen algorithms, in layers/convolution/convolution.cu
  std::shared_ptr<CudaState> cuda_;
  // Sets the descriptors for the current shape and chooses the algorithms
  // (once per shape and math mode): reshape() does it on a GPU, so that the
  // workspace they take (scratch_bytes) is known when the Net plans.
  void prepare_cudnn();
  // The most workspace one call of the chosen algorithms takes (TEST:
  // forward's); 0 before they are chosen.
  size_t cudnn_workspace_bytes() const;
  // A call's scratch on a GPU: for a backward with 16-bit or NHWC blobs the
  // weight's gradient in their dtype and layout (and NHWC with a bias, the
  // bias gradient's slab sums), then cuDNN's workspace.
  struct CudaScratch {
    Tensor weight_grad, workspace;
    Tensor row_partials;  // NHWC with a bias (TRAIN): the bias gradient's slab sums (cuda::channel_row_sums)
  };
  // With 16-bit or NHWC blobs, the weight's copy in their dtype (rounded
  // once) and layout (NHWC: KRSC) in kept(): made from the f32 weight when
  // `refresh` (forward), else as the forward left it.
  Tensor kept_weight(bool refresh);
  CudaScratch lay_out_cuda_scratch(ScratchCarver& c, size_t workspace_bytes, bool backward) const;
  // The top as rows for the bias kernels, [outer][num_output][inner]: NCHW
  // [N][C][H*W], NHWC [N*H*W][C][1].
  struct Rows {
    int64_t outer, inner;
  };
  Rows bias_rows() const {
    const int64_t pixels = out_h_ * out_w_;
    return call_layout() == Layout::kNHWC ? Rows{num_ * pixels, 1} : Rows{num_, pixels};
  }
  void forward_stored_cuda(const Tensor& x, Tensor& y);
  void backward_stored_cuda(const Tensor& dy, const Tensor& x, Tensor* dx);
#endif
};

}  // namespace strata
