// STRATA_HOST_DEVICE for layers whose per-element formulas are written once
// and run by both the CPU loop in <stem>.cpp and the CUDA kernel in
// <stem>.cu: the golden and generic tests, which run on the CPU, then check
// the very expressions the GPU evaluates. The one definition of it (the
// NeuronLayer functors use it too).
#pragma once

#ifdef __CUDACC__
#define STRATA_HOST_DEVICE __host__ __device__ inline
#else
#define STRATA_HOST_DEVICE inline
#endif
