// Reading and writing the safetensors weight format:
//
//   [8 bytes: little-endian u64 N][N bytes: UTF-8 JSON header][data buffer]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the data buffer), plus an optional
// "__metadata__" object of string -> string. Files are validated completely
// when opened, so later code can trust every TensorView.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/dtype.h"

namespace strata {

// One tensor inside an open file. `data` points into the file's bytes and is
// valid while the reader lives; it is not necessarily aligned for `dtype`
// (the format only guarantees alignment when writers pad the header), so copy
// with memcpy rather than casting.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;
  size_t nbytes;
};

class SafetensorsReader {
 public:
  // Memory-maps `path` read-only and validates it; throws IoError naming the
  // file and the problem. (As with any mapping, truncating the file while it
  // is open makes later reads of the lost pages fault.)
  explicit SafetensorsReader(const std::string& path);
  // Validates `bytes` the same way; `what` stands in for the file name in errors.
  static SafetensorsReader from_buffer(std::vector<uint8_t> bytes, const std::string& what);

  // A moved-from reader may only be destroyed or assigned to.
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // Sorted by data offset (which is file order).
  const std::vector<TensorView>& tensors() const;
  // nullptr if there is no tensor called `name`.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;
  // The path given at open (or `what` for from_buffer).
  const std::string& path() const;

 private:
  struct Impl;
  SafetensorsReader() = default;
  std::unique_ptr<Impl> impl_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // product(shape) * dtype_size(dtype) bytes, C order
};

// Writes atomically (write_file_atomically). Tensors are laid out in the given
// order; the header is serialized like the reference implementation (compact
// JSON, "__metadata__" first and omitted when empty) and padded with spaces to
// a multiple of 8 bytes so the data buffer starts 8-byte aligned in the file.
// Throws IoError for bad arguments (duplicate or reserved names, negative
// dims) or write failures.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace strata
