// What a precision (the solver's `precision`, or --precision of `strata test`
// and `strata embed`) changes in a process: on a CUDA device the math of
// GEMMs and convolutions (framework/cuda/math.h); on every device the dtype
// activations are stored in (storage_dtype_of, framework/solver/solver_config.h).
#pragma once

#include <string>

#include "framework/solver/solver_config.h"
#include "framework/tensor.h"

namespace strata {

// "FP32", "TF32", "BF16" or "FP16", in any case (a flag's value);
// ConfigError naming `where` and the four otherwise.
Precision parse_precision(const std::string& value, const std::string& where);

// Sets the GPU's GEMM and convolution math for `p` (process-wide) when
// `device` is a CUDA device. On the CPU the math is f32 in every precision,
// and TF32, a tensor-core mode, is a ConfigError naming `where`.
void apply_precision(Precision p, Device device, const std::string& where);

}  // namespace strata
