// Element types a Tensor can hold, with their sizes, names, and the
// float16/bfloat16 conversions (round-to-nearest-even) the CPU side needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kU8 };

size_t dtype_size(DType t);
// Our short name: "f32", "f16", "bf16", "i32", "u8".
const char* dtype_name(DType t);
// Parses our short name; throws ConfigError listing the known names otherwise.
DType parse_dtype(const std::string& name);
// safetensors spelling: "F32", "F16", "BF16", "I32", "U8".
const char* dtype_safetensors_name(DType t);
// Returns false if the safetensors dtype string is not one we support.
bool dtype_from_safetensors_name(const std::string& name, DType* out);

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bf16_to_float(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

// Converts `n` elements of type `from` (f32, f16 or bf16) at `src` to f32 at
// `dst`. `src` need not be aligned (a tensor inside a mapped weights file).
// Returns false, converting nothing, for the integer types: the caller's
// error names the tensor and the file.
bool convert_to_f32(DType from, const void* src, float* dst, int64_t n);
// The other way: `n` f32 at `src` to `to` (f32, f16 or bf16, rounded to
// nearest even) at `dst`; false, converting nothing, for the integer types.
bool convert_from_f32(DType to, const float* src, void* dst, int64_t n);
// f32, f16 and bf16: what activations may be stored in (Net's storage dtype).
inline bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace strata
