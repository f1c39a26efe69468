#include "framework/dtype.h"

#include "framework/error.h"

namespace strata {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kU8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kU8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    if (name == dtype_name(t)) return t;
  }
  fail<ConfigError>("unknown dtype '", name, "'; known: f32, f16, bf16, i32, u8");
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
  }
  return "?";
}

bool dtype_from_safetensors_name(const std::string& name, DType* out) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    if (name == dtype_safetensors_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

uint16_t float_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): shift the mantissa with round-to-nearest-even.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 - (exp - 127) + 13 ... in [14, 24]
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      x = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

bool convert_to_f32(DType from, const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (from) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, bytes, static_cast<size_t>(n) * sizeof(float));
      return true;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = from == DType::kF16 ? f16_to_float(h) : bf16_to_float(h);
      }
      return true;
    case DType::kI32:
    case DType::kU8:
      break;
  }
  return false;
}

bool convert_from_f32(DType to, const float* src, void* dst, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (to) {
    case DType::kF32:
      if (n > 0) std::memcpy(bytes, src, static_cast<size_t>(n) * sizeof(float));
      return true;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_bf16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return true;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_f16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return true;
    case DType::kI32:
    case DType::kU8:
      break;
  }
  return false;
}

}  // namespace strata
