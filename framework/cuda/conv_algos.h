// Choosing the cuDNN algorithms of a convolution: forward, backward-data and
// backward-filter, each with the math type to run it in and its workspace.
//
// STRATA_CUDNN_ALGO=find (the default) times every candidate with
// cudnnFind*AlgorithmEx on the layer's own input and weights, with scratch
// outputs and a workspace from the caching allocator, and keeps the fastest
// one that succeeded and fits the workspace budget. The answer is kept in
// the process-wide cache and the cache file (framework/cuda/conv_algo_cache.h),
// so two layers of one shape, and later runs on the same GPU and cuDNN,
// measure nothing. STRATA_CUDNN_ALGO=heuristic takes cuDNN's first heuristic
// candidate that fits (cudnnGet*Algorithm_v7), without timing or file.
//
// Workspace budget, per algorithm: the smaller of STRATA_CUDNN_WORKSPACE_LIMIT
// (default 4 GiB) and half of what the device could still give the caching
// allocator (free device memory plus the allocator's cached free blocks);
// the other half stays for the net's arena, taken after a convolution
// chooses (at its reshape, so that the plan can place the workspace).
//
// In FP32 math mode no tensor-op variant is taken for f32 data (they would
// round inputs to TF32); a problem whose dtype is bf16 or f16 runs on tensor
// cores in every math mode. With STRATA_CUDNN_DETERMINISTIC=1 only algorithms cuDNN reports as
// deterministic are taken.
//
// Only compiled with CUDA (STRATA_WITH_CUDA).
#pragma once

#ifdef STRATA_WITH_CUDA

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "framework/cuda/conv_algo_cache.h"

namespace strata::cuda {

// The layer's descriptors for the current shape. Each direction has its own
// convolution descriptor (same geometry), because each runs in the math type
// its algorithm was measured with: choose_conv_algos() sets those.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv[kConvDirections] = {nullptr, nullptr, nullptr};  // by ConvDirection
};

// Device memory the measurement may read: the layer's input and weights
// (the forward output and the gradients go to scratch from the allocator).
// Null: timed on zeroed scratch of x_bytes / w_bytes instead (the kernels'
// speed does not depend on the values), so a layer can choose before its
// input has memory.
struct ConvBuffers {
  const void* x = nullptr;
  const void* w = nullptr;
  size_t x_bytes = 0, y_bytes = 0, w_bytes = 0;
};

struct ConvAlgos {
  cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;  // workspace each call needs
  // The math type each direction's descriptor is set to for its algorithm.
  cudnnMathType_t fwd_math = CUDNN_DEFAULT_MATH, bwd_data_math = CUDNN_DEFAULT_MATH,
                  bwd_filter_math = CUDNN_DEFAULT_MATH;
  // "fwd WINOGRAD_NONFUSED 24.0 MiB, bwd-data ..., bwd-filter ... (measured)": what strata time prints.
  std::string description;
};

// Chooses the algorithms for `problem` (its math field must be the math type
// of the descriptors as given) on the current device, and leaves each
// direction's descriptor in its algorithm's math type. Throws strata::Error
// (naming `where`, the shape and the budget) when some direction has no
// usable algorithm at all.
ConvAlgos choose_conv_algos(const ConvProblem& problem, const ConvDescriptors& d, const ConvBuffers& b,
                            const std::string& where);

// device_key() of the current device, cuDNN and CUDA runtime.
std::string current_device_key();

}  // namespace strata::cuda

#endif  // STRATA_WITH_CUDA
