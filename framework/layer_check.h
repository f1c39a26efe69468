// The generic checks every registered layer type passes, on every
// LayerExample of its schema() (one checker, as Caffe keeps one
// GradientChecker): tests/layer_generic_test.cpp runs them on the built-in
// types, `strata check-layers` on any, a layer library's included.
//   gradients:      analytic bottom and parameter gradients against central
//                   finite differences of J = sum_k sum_i w_ki * top_k[i]
//                   (w random, or the loss weight for loss tops), accumulated
//                   in double, compared as Caffe's GradientChecker does:
//                   |a - n| <= tolerance * max(|a|, |n|, 1); and the gradient
//                   contract: bottom diffs are overwritten (they start as
//                   NaN), parameter diffs accumulated (they start random).
//   zero batch:     bottoms with first dim 0 run forward and backward, both
//                   from setup and after a normal batch, giving zero-batch
//                   tops (or, for tops that do not follow the batch such as a
//                   loss, tops without NaN).
//   extreme values: inputs scaled by 1e4, -1e4 and 1e-30 give no NaN in tops
//                   or gradients.
// Each returns the problems found, one line each (at most five mismatches per
// blob, then a count); empty when the layer passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/layer.h"

namespace strata {

constexpr uint64_t kLayerCheckSeed = 20240601;

std::vector<std::string> check_gradients(const std::string& type, const LayerExample& example,
                                         uint64_t seed = kLayerCheckSeed);
std::vector<std::string> check_zero_batch(const std::string& type, const LayerExample& example,
                                          uint64_t seed = kLayerCheckSeed);
std::vector<std::string> check_extreme_values(const std::string& type, const LayerExample& example,
                                              uint64_t seed = kLayerCheckSeed);

// CPU against CUDA: the example's layer built twice with the same config,
// seed, parameters and inputs, once on the CPU and once on GPU 0; the
// forward tops, the parameters after forward (BatchNorm's running
// statistics), the bottom gradients (overwritten: they start as NaN, and so
// do the values backward_reads() says backward does not read) and the
// parameter gradients (accumulated: they start random) must agree within
// |cpu - gpu| <= tolerance * max(1, |cpu|, |gpu|), in the process's math
// mode. With `storage` bf16 or f16 both sides get their bottoms and tops
// stored in it (parameters stay f32), for a layer that takes it
// (Layer::takes_storage). Run only where cuda_check_unavailable() is empty.
std::vector<std::string> check_cpu_vs_cuda(const std::string& type, const LayerExample& example, float tolerance,
                                           uint64_t seed = kLayerCheckSeed, DType storage = DType::kF32);
// The 16-bit path against the f32 path, on the CPU, for a layer that takes
// `storage` (bf16 or f16; Layer::takes_storage): the example's layer built
// twice with the same seed, parameters and inputs (rounded to `storage`),
// once with f32 blobs and once with its bottoms and tops stored in
// `storage`, as a Net of that storage dtype hands them. The 16-bit tops, the
// parameters after forward, the bottom gradients and the (f32, accumulated)
// parameter gradients must equal the f32 run's rounded to `storage` within
// |a - b| <= tolerance * max(1, |a|, |b|); the same top gradients (rounded),
// NaN-filled bottom gradients, and NaN in the 16-bit values backward_reads()
// leaves out. A problem naming the dtype when the layer does not take it.
std::vector<std::string> check_storage(const std::string& type, const LayerExample& example, DType storage,
                                       uint64_t seed = kLayerCheckSeed);
// Whether the example's layer, built for `device`, takes blobs stored in `storage`.
bool example_takes_storage(const std::string& type, const LayerExample& example, DType storage,
                           Device device = Device::cpu());
// The tolerance of check_storage and of the CPU-against-CUDA check in a 16-bit
// storage dtype: two units in the last place of a value in [1, 2) (bf16
// keeps 8 significant bits, f16 11), room for the one rounding of a value the
// 16-bit path stores and the f32 path does not (a top backward reads), times
// the roundings the layer's 16-bit path makes (LayerSchema::storage_roundings).
float storage_check_tolerance(DType storage, int roundings = 1);
// The same for a registered layer type, by its schema's storage_roundings.
float storage_check_tolerance(const std::string& type, DType storage);

// The NHWC path against the NCHW path, on the CPU, for a layer that takes
// channels-last blobs (Layer::channels_last): the example's layer built
// twice with the same seed, parameters and inputs, once called NCHW and once
// NHWC with its bottoms and tops laid out so (rank 3 or more; as a Net with
// NetOptions::channels_last hands them). The tops (laid back), the
// parameters after forward, the bottom gradients and the parameter gradients
// must be the same bits; the same top gradients, NaN-filled bottom
// gradients, and NaN in the NHWC values backward_reads() leaves out. A
// problem when the layer does not take NHWC.
std::vector<std::string> check_channels_last(const std::string& type, const LayerExample& example,
                                             uint64_t seed = kLayerCheckSeed);
// Whether the example's layer takes NHWC blobs (Layer::channels_last).
bool example_takes_channels_last(const std::string& type, const LayerExample& example);

// Why check_cpu_vs_cuda cannot run for `type` here ("this build has no
// CUDA", "no GPU on this machine", "the layer has no CUDA code"), or empty.
std::string cuda_check_unavailable(const std::string& type);
// The tolerance for FP32 math (the default mode): the CPU and the GPU differ
// by summation order and the GPU's exp/tanh only.
constexpr float kCudaCheckFp32Tolerance = 2e-4f;

// "Convolution example {config} bottoms [2, 3] phase TRAIN": what the
// problems of one example are about.
std::string describe_example(const std::string& type, const LayerExample& example);

}  // namespace strata
