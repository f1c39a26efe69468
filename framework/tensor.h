// Tensor: a shape, an element type, a device and shared storage.
// Contiguous and row-major (NCHW for images). Copies of a Tensor share storage;
// clone() makes a deep copy.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/dtype.h"

namespace strata {

using Shape = std::vector<int64_t>;

enum class DeviceKind { kCPU, kCUDA };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int index = 0;

  static Device cpu() { return Device{}; }
  static Device cuda(int i) { return Device{DeviceKind::kCUDA, i}; }
  // "cpu", "cuda", "cuda:1"; ConfigError otherwise.
  static Device parse(const std::string& text);
  std::string str() const;
  bool is_cpu() const { return kind == DeviceKind::kCPU; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// kDeferred: the size is known and accounted in the open MemoryPlan
// (framework/memory_plan.h), the memory itself taken on first use, so that a
// Net can add up what it needs and refuse before allocating any of it.
enum class Allocation { kNow, kDeferred };

// Owns one device allocation. CPU memory is 64-byte aligned (a cache line and
// the widest SIMD register), and zero-initialised.
class Storage {
 public:
  Storage(size_t bytes, Device device, Allocation when = Allocation::kNow);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A deferred storage allocates here on first use (once, thread-safe).
  void* data() { return const_cast<void*>(static_cast<const Storage*>(this)->data()); }
  const void* data() const {
    void* p = ptr_.load(std::memory_order_acquire);
    return p || bytes_ == 0 ? p : allocate();
  }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool allocated() const { return bytes_ == 0 || ptr_.load(std::memory_order_acquire) != nullptr; }

 private:
  void* allocate() const;

  mutable std::atomic<void*> ptr_{nullptr};
  mutable std::once_flag once_;
  size_t bytes_ = 0;
  Device device_;
};

// 64-byte aligned CPU allocation; throws Error on failure. Pair with aligned_free.
void* aligned_alloc_bytes(size_t bytes);
void aligned_free(void* p);

std::string shape_str(const Shape& s);  // "[2, 3, 4]"
// Element count; ShapeError for a negative dimension or a count beyond int64.
int64_t shape_numel(const Shape& s);
// Bytes of `numel` elements of `dtype`; ShapeError (naming `shape`) beyond size_t.
size_t shape_bytes(const Shape& shape, int64_t numel, DType dtype);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu());

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Axis size; negative axes count from the end. Error when out of range.
  int64_t dim(int axis) const;
  int64_t numel() const { return numel_; }
  // Product of dims in [start, end).
  int64_t count(int start, int end) const;
  int64_t count(int start) const { return count(start, ndim()); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  // Bytes actually reserved (may exceed nbytes() after shrinking); a view's
  // are its range of the storage.
  size_t capacity_bytes() const { return storage_ ? (view_bytes_ ? view_bytes_ : storage_->bytes()) : 0; }
  // Bytes of the whole storage (a view's is the storage it is a range of).
  size_t storage_bytes() const { return storage_ ? storage_->bytes() : 0; }
  bool defined() const { return storage_ != nullptr || numel_ == 0; }
  // Whether the two may touch the same bytes: same storage, overlapping ranges.
  bool shares_storage_with(const Tensor& o) const;
  // A tensor of `shape` and `dtype` over bytes [offset, offset + bytes) of
  // this tensor's storage (the two share it): what a memory plan hands out
  // of its arena. A resize beyond `bytes` gives the view storage of its own
  // instead of writing past its range. ShapeError when the range is not
  // inside this tensor's or the shape does not fit in `bytes`.
  Tensor view_bytes(size_t offset, size_t bytes, const Shape& shape, DType dtype) const;
  // Tells storages apart without touching them (raw_data() would allocate a
  // deferred one); nullptr when there is none.
  const void* storage_id() const { return storage_.get(); }
  // Whether its memory has been taken (a deferred storage's is not, until first use).
  bool holds_memory() const { return storage_ && storage_->allocated(); }

  // Typed host access, for CPU code; checks that T matches dtype(). On a
  // tensor that lives on a CUDA device it throws Error instead of handing
  // out a device address the host cannot read: copy the tensor to the host
  // with to(Device::cpu()), or, in CUDA code, use device_data<T>().
  // In a CUDA translation unit (a .cu file, and every header it includes)
  // it does not compile at all: a CUDA path that reaches host memory, also
  // through an inline helper it shares with the CPU path, is a build error
  // (tests/lint/device_access.py checks the helpers in other files).
  template <typename T> T* data();
  template <typename T> const T* data() const;
  // The storage address wherever the tensor lives, for code that gives it to
  // the device (kernels, cuBLAS and cuDNN, NCCL, copies); checks T only.
  template <typename T> T* device_data();
  template <typename T> const T* device_data() const;
  // Untyped, wherever it lives, unchecked: for copies that name the device
  // (cuda::copy_bytes) and for telling storages apart.
  void* raw_data() { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  const void* raw_data() const { return storage_ ? static_cast<const char*>(storage_->data()) + offset_ : nullptr; }

  // New shape, same element count; keeps storage. ShapeError otherwise.
  void reshape(const Shape& shape);
  // New shape of any size; reallocates only when the storage is too small
  // (contents are then zero), so per-iteration reshapes do not allocate.
  void resize(const Shape& shape);
  void zero();              // on a CUDA device: queued on its compute stream
  void fill(float value);  // f32 only; likewise
  // Every byte set to `byte`, whatever the dtype (0xff: NaN in f32, f16 and
  // bf16 alike, what a checked plan poisons released buffers with); likewise.
  void fill_bytes(uint8_t byte);
  // Element-wise copy; same numel and dtype required (shapes may differ).
  // Works across devices (host <-> CUDA device, device <-> device); returns
  // when the destination may be read on the host (copies into device memory
  // are ordered on that device's compute stream).
  void copy_from(const Tensor& src);
  Tensor clone() const;
  // A copy on `device` (this tensor itself when it already lives there).
  Tensor to(Device device) const;

 private:
  // The accessors' checks: one inline compare on a member each, the message
  // built only when it fails (data<T>() runs inside hot CPU loops).
  template <typename T> void check_element_type() const;
  void check_on_host() const {
    if (device_.kind != DeviceKind::kCPU) fail_host_access();
  }
  [[noreturn]] void fail_type(DType accessed_as) const;
  [[noreturn]] void fail_host_access() const;

  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  Device device_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;      // a view's first byte in storage_
  size_t view_bytes_ = 0;  // a view's bytes; 0: the whole storage is this tensor's
};

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kF16; };  // raw bits

template <typename T>
void Tensor::check_element_type() const {
  // uint16_t is the raw bit pattern of either 16-bit float type.
  if (dtype_ != DTypeOf<T>::value && !(std::is_same_v<T, uint16_t> && dtype_ == DType::kBF16)) {
    fail_type(DTypeOf<T>::value);
  }
}

#ifdef __CUDACC__
template <typename T> struct HostAccessInCudaCode : std::false_type {};

template <typename T>
T* Tensor::data() {
  static_assert(HostAccessInCudaCode<T>::value,
                "Tensor::data<T>() reads memory on the host and is not for CUDA code: use device_data<T>() "
                "(a helper shared with the CPU path should return the Tensor and let each side pick its accessor)");
  return nullptr;
}

template <typename T>
const T* Tensor::data() const {
  static_assert(HostAccessInCudaCode<T>::value,
                "Tensor::data<T>() reads memory on the host and is not for CUDA code: use device_data<T>() "
                "(a helper shared with the CPU path should return the Tensor and let each side pick its accessor)");
  return nullptr;
}
#else
template <typename T>
T* Tensor::data() {
  check_on_host();
  check_element_type<T>();
  return static_cast<T*>(raw_data());
}

template <typename T>
const T* Tensor::data() const {
  check_on_host();
  check_element_type<T>();
  return static_cast<const T*>(raw_data());
}
#endif

template <typename T>
T* Tensor::device_data() {
  check_element_type<T>();
  return static_cast<T*>(raw_data());
}

template <typename T>
const T* Tensor::device_data() const {
  check_element_type<T>();
  return static_cast<const T*>(raw_data());
}

// Value and gradient of one activation or parameter.
struct Blob {
  Tensor data;
  Tensor diff;

  Blob() = default;
  explicit Blob(const Shape& shape) : data(shape), diff(shape) {}
  const Shape& shape() const { return data.shape(); }
  int64_t numel() const { return data.numel(); }
  void resize(const Shape& shape) {
    data.resize(shape);
    diff.resize(shape);
  }
  void reshape_like(const Blob& other) { resize(other.shape()); }
};

using BlobVec = std::vector<Blob*>;

// Copies `count` elements from src[src_offset ..] to dst[dst_offset ..]
// (element offsets into the flat storage), between any two places: host and
// host, host and a CUDA device, or two devices, with Tensor::copy_from's
// ordering. Same dtype and both ranges in bounds, ShapeError otherwise.
// What packs parameters into one flat buffer for a collective.
void copy_elements(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count);
// The same for bytes, whatever the two dtypes: what packs tensors of several
// dtypes into one u8 buffer (a pipeline stage's messages to one peer).
void copy_bytes(Tensor& dst, size_t dst_offset, const Tensor& src, size_t src_offset, size_t bytes);
// dst = src converted element by element between f32, f16 and bf16 (to the
// nearest, ties to even; NaN stays NaN), on the device both live on (the
// same one; on a CUDA device queued on its compute stream). Same numel
// required (shapes may differ); the same dtype is a plain copy. What the Net
// converts a blob stored in bf16/f16 to f32 with, and back, around a layer
// that computes in f32 (framework/net_storage.cpp).
void cast_into(Tensor& dst, const Tensor& src);

}  // namespace strata
