// NumPy .npy files (format versions 1.0, 2.0 and 3.0): little-endian, C-order
// arrays of the dtypes the framework uses. Reading converts float64 to
// float32, int64 to int32 (range-checked) and bool to uint8, so arrays saved
// with NumPy defaults load without a conversion step in Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/dtype.h"
#include "framework/error.h"

namespace strata {

struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a 0-d (scalar) array
  std::vector<uint8_t> data;   // C order, numel() * dtype_size(dtype) bytes

  int64_t numel() const;

  // Typed view of data: float for f32, int32_t for i32, uint8_t for u8, and
  // uint16_t (raw bits) for f16/bf16. Throws Error on a mismatch.
  template <class T>
  const T* as() const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, int32_t> ||
                      std::is_same_v<T, uint8_t> || std::is_same_v<T, uint16_t>,
                  "NpyArray::as<T>: T must be float, int32_t, uint8_t or uint16_t");
    bool ok;
    if constexpr (std::is_same_v<T, float>) {
      ok = dtype == DType::kF32;
    } else if constexpr (std::is_same_v<T, int32_t>) {
      ok = dtype == DType::kI32;
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      ok = dtype == DType::kU8;
    } else {
      ok = dtype == DType::kF16 || dtype == DType::kBF16;
    }
    STRATA_CHECK(ok, "NpyArray holds ", dtype_name(dtype),
                 ", which does not match the requested type");
    // std::vector's buffer comes from operator new, aligned for any scalar.
    return reinterpret_cast<const T*>(data.data());
  }
};

// Throws IoError naming the file for anything it cannot read exactly:
// bad magic, truncated or unparsable header, unsupported dtype, big-endian or
// Fortran-order data, or data shorter (or longer) than the shape requires.
NpyArray read_npy(const std::string& path);
// The same from bytes in memory; `what` stands in for the file name in errors.
NpyArray read_npy_buffer(const uint8_t* bytes, size_t size, const std::string& what);
NpyArray read_npy_buffer(const std::vector<uint8_t>& bytes, const std::string& what);

// Writes atomically in format 1.0, byte-for-byte as numpy.save would (same
// header text and 64-byte alignment). `data` holds product(shape) elements of
// `dtype` in C order. bf16 has no NumPy dtype and is rejected.
void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
               const void* data);

}  // namespace strata
