// Gradients on the wire: f32 as they are, or rounded to f16/bf16 (round to
// nearest even) to halve the bytes. Written once for the strategies that move
// gradients: data parallel's buckets and the parameter server's pushes.
#pragma once

#include <cstdint>
#include <string>

#include "framework/dtype.h"

namespace strata::parallel {

enum class GradCompression { kNone, kFP16, kBF16 };

// "NONE", "FP16" or "BF16" (any case); a ConfigError naming `where` else.
GradCompression parse_grad_compression(const std::string& text, const std::string& where);
const char* grad_compression_name(GradCompression c);  // "NONE", "FP16", "BF16"

// The dtype of gradients on the wire, and the conversions to and from it,
// `scale` applied before rounding.
DType wire_dtype(GradCompression c);
void encode_gradients(const float* src, int64_t n, float scale, GradCompression c, void* dst);
void decode_gradients(const void* src, int64_t n, GradCompression c, float* dst);

}  // namespace strata::parallel
