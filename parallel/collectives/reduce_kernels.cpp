#include "parallel/collectives/reduce_kernels.h"

#include <algorithm>
#include <cstdint>

#include "framework/error.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace strata::parallel {

namespace {

// Plain loops over restrict-qualified pointers: the compiler vectorises them.
template <typename T, typename Op>
void combine(T* __restrict dst, const T* __restrict src, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(dst[i], src[i]);
}

template <typename T>
void reduce_typed(T* dst, const T* src, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      combine(dst, src, n, [](T a, T b) { return static_cast<T>(a + b); });
      return;
    case ReduceOp::kMin:
      combine(dst, src, n, [](T a, T b) { return b < a ? b : a; });
      return;
    case ReduceOp::kMax:
      combine(dst, src, n, [](T a, T b) { return a < b ? b : a; });
      return;
  }
}

// Integer sums wrap: do them in the unsigned type so overflow is defined.
void reduce_i32(int32_t* dst, const int32_t* src, size_t n, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    auto* d = reinterpret_cast<uint32_t*>(dst);
    const auto* s = reinterpret_cast<const uint32_t*>(src);
    combine(d, s, n, [](uint32_t a, uint32_t b) { return a + b; });
    return;
  }
  reduce_typed(dst, src, n, op);
}

// 16-bit floats go through f32 in blocks, so the f32 loop can vectorise.
constexpr size_t kBlock = 256;

void f16_block_to_f32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = f16_to_float(in[i]);
}

void f32_block_to_f16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = float_to_f16(in[i]);
}

void bf16_block_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

void f32_block_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

using ToF32 = void (*)(const uint16_t*, float*, size_t);
using FromF32 = void (*)(const float*, uint16_t*, size_t);

void reduce_half(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op, ToF32 widen, FromF32 narrow) {
  float a[kBlock];
  float b[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t len = std::min(kBlock, n - start);
    widen(dst + start, a, len);
    widen(src + start, b, len);
    reduce_typed(a, b, len, op);
    narrow(a, dst + start, len);
  }
}

void scale_half(uint16_t* data, size_t n, float divisor, ToF32 widen, FromF32 narrow) {
  float a[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t len = std::min(kBlock, n - start);
    widen(data + start, a, len);
    for (size_t i = 0; i < len; ++i) a[i] /= divisor;
    narrow(a, data + start, len);
  }
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op) {
  if (n == 0) return;
  switch (dtype) {
    case DType::kF32:
      reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
      return;
    case DType::kF16:
      reduce_half(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op, f16_block_to_f32,
                  f32_block_to_f16);
      return;
    case DType::kBF16:
      reduce_half(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op, bf16_block_to_f32,
                  f32_block_to_bf16);
      return;
    case DType::kI32:
      reduce_i32(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
      return;
    case DType::kU8:
      reduce_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op);
      return;
  }
  fail<Error>("reduce: unknown dtype ", static_cast<int>(dtype));
}

void scale_average(void* data, size_t n, DType dtype, int world_size) {
  STRATA_CHECK(world_size >= 1, "world size ", world_size);
  if (n == 0 || world_size == 1) return;
  switch (dtype) {
    case DType::kF32: {
      // Division (not multiplication by 1/world_size) keeps exact quotients exact.
      auto* p = static_cast<float*>(data);
      const float d = static_cast<float>(world_size);
      for (size_t i = 0; i < n; ++i) p[i] /= d;
      return;
    }
    case DType::kF16:
      scale_half(static_cast<uint16_t*>(data), n, static_cast<float>(world_size), f16_block_to_f32, f32_block_to_f16);
      return;
    case DType::kBF16:
      scale_half(static_cast<uint16_t*>(data), n, static_cast<float>(world_size), bf16_block_to_f32, f32_block_to_bf16);
      return;
    case DType::kI32: {
      auto* p = static_cast<int32_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] /= world_size;
      return;
    }
    case DType::kU8: {
      auto* p = static_cast<uint8_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(p[i] / world_size);
      return;
    }
  }
  fail<Error>("average: unknown dtype ", static_cast<int>(dtype));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

}  // namespace strata::parallel
