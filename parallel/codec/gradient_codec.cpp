#include "parallel/codec/gradient_codec.h"

#include <cctype>
#include <cstring>

#include "framework/cpu/threads.h"
#include "framework/error.h"

namespace strata::parallel {

namespace {

constexpr int64_t kCopyChunk = 1 << 15;  // elements per thread

}  // namespace

GradCompression parse_grad_compression(const std::string& text, const std::string& where) {
  std::string up = text;
  for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (up == "NONE") return GradCompression::kNone;
  if (up == "FP16") return GradCompression::kFP16;
  if (up == "BF16") return GradCompression::kBF16;
  fail<ConfigError>(where, ": compression must be NONE, FP16 or BF16, got '", text, "'");
}

const char* grad_compression_name(GradCompression c) {
  switch (c) {
    case GradCompression::kFP16: return "FP16";
    case GradCompression::kBF16: return "BF16";
    case GradCompression::kNone: break;
  }
  return "NONE";
}

DType wire_dtype(GradCompression c) {
  switch (c) {
    case GradCompression::kFP16: return DType::kF16;
    case GradCompression::kBF16: return DType::kBF16;
    case GradCompression::kNone: break;
  }
  return DType::kF32;
}

void encode_gradients(const float* src, int64_t n, float scale, GradCompression c, void* dst) {
  parallel_for(n, kCopyChunk, [&](int64_t b, int64_t e) {
    if (c == GradCompression::kNone) {
      float* d = static_cast<float*>(dst);
      if (scale == 1.0f) {
        std::memcpy(d + b, src + b, static_cast<size_t>(e - b) * sizeof(float));
      } else {
        for (int64_t i = b; i < e; ++i) d[i] = src[i] * scale;
      }
    } else if (c == GradCompression::kFP16) {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = b; i < e; ++i) d[i] = float_to_f16(src[i] * scale);
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = b; i < e; ++i) d[i] = float_to_bf16(src[i] * scale);
    }
  });
}

void decode_gradients(const void* src, int64_t n, GradCompression c, float* dst) {
  parallel_for(n, kCopyChunk, [&](int64_t b, int64_t e) {
    if (c == GradCompression::kNone) {
      std::memcpy(dst + b, static_cast<const float*>(src) + b, static_cast<size_t>(e - b) * sizeof(float));
    } else if (c == GradCompression::kFP16) {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = b; i < e; ++i) dst[i] = f16_to_float(s[i]);
    } else {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = b; i < e; ++i) dst[i] = bf16_to_float(s[i]);
    }
  });
}

}  // namespace strata::parallel
