// PatchEmbed on the GPU, as patch_embed.cpp: the patches are gathered into a
// [N * T, C * P * P] matrix (one thread per value) and projected with one
// cuBLAS GEMM; backward scatters the patch gradients back. Patches tile the
// image without overlap, so the scatter is a permutation that writes every
// input gradient once. With 16-bit blobs the patch matrix is kept in their
// dtype and the GEMMs run on 16-bit operands (tensor cores, f32
// accumulation) against a 16-bit copy of the weight that the forward makes
// and keeps for the backward, as InnerProduct's (inner_product.cu): the bias laid into the
// output rows first, the weight gradient straight into its f32 gradient.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "layers/neuron_layer.h"  // check_same_storage
#include "layers/patch_embed.h"

namespace strata {
namespace {

struct PatchGeom {
  int64_t channels, height, width, patch;
};

// The image offset of element (row, col) of the patch matrix.
__device__ int64_t image_offset(const PatchGeom& g, int64_t row, int64_t col) {
  const int64_t P = g.patch, gh = g.height / P, gw = g.width / P;
  const int64_t px = row % gw, py = (row / gw) % gh, n = row / (gw * gh);
  const int64_t kx = col % P, ky = (col / P) % P, c = col / (P * P);
  return ((n * g.channels + c) * g.height + py * P + ky) * g.width + px * P + kx;
}

// T: the blobs' element (f32, bf16 or f16); values are moved, not converted.
template <class T>
__global__ void gather_patches(int64_t total, PatchGeom g, const T* x, T* patches) {
  const int64_t k = g.channels * g.patch * g.patch;
  STRATA_CUDA_LOOP(i, total) patches[i] = x[image_offset(g, i / k, i % k)];
}

template <class T>
__global__ void scatter_patches(int64_t total, PatchGeom g, const T* dpatches, T* dx) {
  const int64_t k = g.channels * g.patch * g.patch;
  STRATA_CUDA_LOOP(i, total) dx[image_offset(g, i / k, i % k)] = dpatches[i];
}

// Moves the patches of `x` (any element of 2 or 4 bytes) into `patches`.
void move_patches(bool gather, int64_t total, const PatchGeom& g, DType dtype, const void* src, void* dst) {
  if (total == 0) return;
  cudaStream_t s = cuda::compute_stream();
  if (dtype_size(dtype) == 4) {
    if (gather) {
      gather_patches<float><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
          total, g, static_cast<const float*>(src), static_cast<float*>(dst));
    } else {
      scatter_patches<float><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
          total, g, static_cast<const float*>(src), static_cast<float*>(dst));
    }
  } else {
    if (gather) {
      gather_patches<uint16_t><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
          total, g, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
    } else {
      scatter_patches<uint16_t><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
          total, g, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
    }
  }
  STRATA_KERNEL_CHECK();
}

}  // namespace

Tensor PatchEmbedLayer::kept_weight(bool refresh) {
  ScratchCarver carver(kept(kept_bytes()));
  carver.take(patches_shape(), call_dtype());  // the patch matrix first
  Tensor w = carver.take(param(0).shape(), call_dtype());
  if (refresh) cast_into(w, param(0).data);  // rounded on the device, on the compute stream
  return w;
}

void PatchEmbedLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t tokens = (h_ / patch_) * (w_ / patch_);
  const int64_t m = n_ * tokens, k = channels_ * patch_ * patch_, d = num_output_;
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("PatchEmbed forward", {&xt, &yt});  // names both dtypes
  Tensor kept_patches = patch_matrix(kept(kept_bytes()));
  if (m == 0) return;
  const DType st = xt.dtype();
  const PatchGeom g{channels_, h_, w_, patch_};
  move_patches(true, m * k, g, st, xt.raw_data(), kept_patches.raw_data());
  if (st == DType::kF32) {
    float* y = yt.device_data<float>();
    cuda::gemm(Transpose::kNo, Transpose::kYes, m, d, k, 1.0f, kept_patches.device_data<float>(),
               param(0).data.device_data<float>(), 0.0f, y);
    cuda::add_row_bias(m, d, param(1).data.device_data<float>(), y);
    return;
  }
  const Tensor w = kept_weight(true);
  cuda::linear_stored(Transpose::kYes, m, d, k, kept_patches.raw_data(), w.raw_data(), st,
                      param(1).data.device_data<float>(), yt.raw_data());
}

void PatchEmbedLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                    const BlobVec& bottom) {
  const Tensor kept_patches = patch_matrix(kept(kept_bytes()));  // as forward left it
  const int64_t m = kept_patches.dim(0), k = kept_patches.dim(1), d = num_output_;
  // A zero batch adds nothing to the parameter gradients and has no input gradient.
  if (m == 0) return;
  const Tensor& dyt = top[0]->diff;
  const DType st = dyt.dtype();
  Scratch sc = take_scratch(propagate_down[0]);
  // The parameter gradients accumulate in f32 (16-bit blobs: 16-bit operands, f32 result).
  if (st == DType::kF32) {
    const float* dy = dyt.device_data<float>();
    cuda::gemm(Transpose::kYes, Transpose::kNo, d, k, m, 1.0f, dy, kept_patches.device_data<float>(), 1.0f,
               param(0).diff.device_data<float>());
    cuda::column_sums(m, d, dy, 1.0f, param(1).diff.device_data<float>());
  } else {
    cuda::linear_grads_stored(true, m, d, k, dyt.raw_data(), kept_patches.raw_data(), st,
                              param(0).diff.device_data<float>(), param(1).diff.device_data<float>());
  }
  if (!propagate_down[0]) return;
  Tensor& dxt = bottom[0]->diff;
  if (dxt.dtype() != st) check_same_storage("PatchEmbed backward", {&dyt, &dxt});
  if (st == DType::kF32) {
    cuda::gemm(Transpose::kNo, Transpose::kNo, m, k, d, 1.0f, dyt.device_data<float>(),
               param(0).data.device_data<float>(), 0.0f, sc.dpatches.device_data<float>());
  } else {
    const Tensor w = kept_weight(false);  // as the forward rounded it
    cuda::gemm_stored(Transpose::kNo, Transpose::kNo, m, k, d, 1.0f, dyt.raw_data(), w.raw_data(), st, 0.0f,
                      sc.dpatches.raw_data(), st);
  }
  const PatchGeom g{channels_, h_, w_, patch_};
  move_patches(false, m * k, g, st, sc.dpatches.raw_data(), dxt.raw_data());
}

}  // namespace strata
