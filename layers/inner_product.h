// InnerProduct (Caffe "InnerProduct", PyTorch Linear): y = x W^T + b.
// The bottom is viewed as [M, K] with M = product of dims before `axis` and
// K = product of dims from `axis` on; the top is bottom dims before `axis`
// followed by num_output. Weight [num_output, K] (PyTorch layout), or
// [K, num_output] with transpose: true (Caffe's transpose flag); bias [num_output].
//
// Tensor parallel (`split`, with a tensor-parallel communicator of T ranks;
// without one the layer is ordinary), Megatron's pair:
// - COLUMN: this rank holds weight rows [r*out/T, (r+1)*out/T) and their
//   bias; its top is that slice of the output (last axis out/T). Backward
//   allreduces the input gradient.
// - ROW: the bottom is such a slice (e.g. a COLUMN layer's top through
//   element-wise layers): this rank holds the matching weight columns;
//   forward allreduces the partial outputs and adds the (unsplit) bias once.
// A COLUMN layer followed by a ROW layer costs one allreduce each way.
#pragma once

#include "framework/filler.h"
#include "framework/layer.h"
#include "framework/tensor_parallel.h"

namespace strata {

class InnerProductLayer : public Layer {
 public:
  InnerProductLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // The weight gradient reads the input; nothing reads the output.
  BackwardReads backward_reads() const override { return {true, false}; }
  // Blobs stored in bf16 or f16 are taken as they are (not with split: the
  // tensor-parallel sums are in f32). The CPU widens blocks of rows into f32
  // scratch, multiplies in f32 and rounds each output once; a GPU multiplies
  // the 16-bit blobs on tensor cores with f32 accumulation, against a 16-bit
  // copy of the weight made by the forward and kept for the backward (one
  // rounding of the weight per step, not per call). Weight and bias and
  // their gradients stay f32.
  bool takes_storage(DType dtype) const override {
    return dtype == DType::kF32 || (is_float_dtype(dtype) && split_ == Split::kNone);
  }
  // 16-bit blobs: the CPU's row blocks.
  size_t scratch_bytes() const override;
  // A ReLU after it applied to each row as its bias is added: on the CPU;
  // on a GPU in the bias kernel, so with a bias and f32 blobs (the 16-bit
  // GEMM adds its bias itself).
  bool takes_epilogue(const Epilogue& e) const override {
    const bool here = device().is_cpu() || (bias_ == Bias::kYes && call_dtype() == DType::kF32);
    return e.kind == Epilogue::Kind::kReLU && split_ == Split::kNone && here;
  }
  // 16-bit blobs on a GPU: the weight's 16-bit copy, from forward to backward.
  size_t kept_bytes() const override;

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in inner_product.cu
  // Tensor parallel (split) reduces through a communicator the host drives.
  bool replays_in_a_graph() const override { return split_ == Split::kNone; }
  ParamShard param_shard(size_t param_index) const override;

 private:
  // Weight storage order.
  enum class WeightLayout { kOutputMajor, kInputMajor };
  enum class Bias { kNo, kYes };
  enum class Split { kNone, kColumn, kRow };

  int canonical_axis(const Shape& s) const;
  // y [rows, num_output] += bias, then the fused epilogue (Layer::epilogue), on the CPU.
  void add_bias_and_epilogue(int64_t rows, float* y) const;
  // The CPU's 16-bit paths (inner_product.cpp), a block of rows at a time.
  int64_t stored_block_rows() const;
  void forward_stored_cpu(const Tensor& x, Tensor& y);
  void backward_stored_cpu(const Tensor& dy, const Tensor& x, Tensor* dx);
#ifdef STRATA_WITH_CUDA
  // The GPU's (inner_product.cu). The weight's 16-bit copy in kept():
  // rounded from the f32 weight when `refresh` (forward), else as the
  // forward left it.
  Tensor stored_weight(bool refresh);
  void forward_stored_cuda(const Tensor& x, Tensor& y);
  void backward_stored_cuda(const Tensor& dy, const Tensor& x, Tensor* dx);
#endif

  int64_t num_output_;  // this rank's outputs (num_output / T for COLUMN)
  int64_t full_output_;
  Split split_ = Split::kNone;
  TpGroup tp_;  // active only when split and the group has > 1 rank
  Bias bias_;
  int axis_;
  WeightLayout layout_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t k_ = 0;  // inputs per sample, fixed at setup
  int64_t m_ = 0;  // samples in the current batch
};

}  // namespace strata
