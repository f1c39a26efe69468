#include "framework/solver/precision.h"

#include <cctype>

#include "framework/error.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/math.h"
#endif

namespace strata {

Precision parse_precision(const std::string& value, const std::string& where) {
  std::string upper = value;  // a flag's value in any case: bf16 as BF16
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (Precision p : {Precision::kFP32, Precision::kTF32, Precision::kBF16, Precision::kFP16}) {
    if (upper == precision_name(p)) return p;
  }
  fail<ConfigError>(where, ": unknown precision '", value, "'; use FP32, TF32, BF16 or FP16");
}

void apply_precision(Precision p, Device device, const std::string& where) {
  if (device.is_cpu()) {
    if (p == Precision::kTF32) {
      fail<ConfigError>(where, ": precision TF32 is a tensor-core mode of CUDA devices (--device cuda); on the CPU "
                               "use FP32, or BF16/FP16 to store activations in 16 bits");
    }
    return;
  }
#ifdef STRATA_WITH_CUDA
  // FP16 has no fp16 GEMM mode yet: TF32 math, with loss scaling when training (docs/config.md).
  cuda::set_math_mode(p == Precision::kFP32   ? cuda::MathMode::kFP32
                      : p == Precision::kBF16 ? cuda::MathMode::kBF16
                                              : cuda::MathMode::kTF32);
#endif
}

}  // namespace strata
