#include "framework/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "framework/error.h"
#include "framework/memory_cap.h"
#include "framework/memory_plan.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

namespace {

#ifdef STRATA_WITH_CUDA
// Device index for the CUDA copy API: -1 is host memory.
int copy_index(Device d) { return d.is_cpu() ? -1 : d.index; }
#else
[[noreturn]] void no_cuda(Device d) {
  fail<ConfigError>("device ", d.str(), " requested, but this build of strata has no CUDA backend "
                    "(it was built without nvcc or with -DSTRATA_CUDA=OFF); use --device cpu");
}
#endif

}  // namespace

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string idx = text.substr(5);
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 4) {
      return cuda(std::stoi(idx));
    }
  }
  fail<ConfigError>("unknown device '", text, "'; expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return kind == DeviceKind::kCPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

void* aligned_alloc_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded < bytes ? nullptr : std::aligned_alloc(64, rounded);
  if (!p) {
    fail<OutOfMemoryError>("out of CPU memory: could not allocate ", format_bytes(bytes), " (", bytes,
                           " bytes); reduce batch_size or the model's size, or free memory on this machine");
  }
  return p;
}

void aligned_free(void* p) { std::free(p); }

namespace {

// Host tensors of at least this many bytes are mapped from the kernel and
// unmapped when freed. malloc would map them too, but after the first such
// free it raises its mapping threshold and serves later ones from its heap,
// which keeps what was freed resident: sharded data parallel's gathers
// (a bucket's weights allocated and freed at every pass) then grew the
// resident set by several buckets. Mapped pages come zeroed, so they need
// no memset either. Not under AddressSanitizer, which checks malloc's blocks.
constexpr size_t kMapAtLeast = size_t{1} << 20;
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMapLarge = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kMapLarge = false;
#else
constexpr bool kMapLarge = true;
#endif
#else
constexpr bool kMapLarge = true;
#endif

bool mapped(size_t bytes) { return kMapLarge && bytes >= kMapAtLeast; }

void* host_alloc_zeroed(size_t bytes) {
  if (!mapped(bytes)) {
    void* p = aligned_alloc_bytes(bytes);
    if (p) std::memset(p, 0, bytes);
    return p;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fail<OutOfMemoryError>("out of CPU memory: could not map ", format_bytes(bytes), " (", bytes,
                           " bytes); reduce batch_size or the model's size, or free memory on this machine");
  }
  return p;
}

void host_free(void* p, size_t bytes) {
  if (mapped(bytes)) {
    munmap(p, bytes);
  } else {
    aligned_free(p);
  }
}

}  // namespace

namespace {

// Allocations at least this large are first compared with what the machine
// can give: memset touches every page, so one that cannot fit would only
// push the machine into swap or the OOM killer before failing.
constexpr size_t kCheckMachineAbove = size_t{256} << 20;

void check_fits_machine(size_t bytes) {
  if (bytes < kCheckMachineAbove) return;
  const MachineMemory m = machine_memory_available();
  if (bytes <= m.available) return;
  fail<OutOfMemoryError>("out of CPU memory: a tensor of ", format_bytes(bytes), " was asked for, but only ",
                         format_bytes(m.available), " is available (", m.source,
                         "); reduce batch_size or the model's size, or run on a machine with more memory");
}

}  // namespace

Storage::Storage(size_t bytes, Device device, Allocation when) : bytes_(bytes), device_(device) {
  if (when == Allocation::kNow) allocate();
}

void* Storage::allocate() const {
  std::call_once(once_, [this] {
    memory_cap_acquire(bytes_);  // --max-memory (framework/memory_cap.h); throws over the cap
    void* p = nullptr;
    try {
      if (!device_.is_cpu()) {
#ifdef STRATA_WITH_CUDA
        p = cuda::device_malloc(bytes_, device_.index);  // zeroed, from the caching allocator
#else
        no_cuda(device_);
#endif
      } else {
        check_fits_machine(bytes_);
        p = host_alloc_zeroed(bytes_);
      }
    } catch (...) {
      memory_cap_release(bytes_);
      throw;
    }
    ptr_.store(p, std::memory_order_release);
  });
  return ptr_.load(std::memory_order_acquire);
}

Storage::~Storage() {
  void* p = ptr_.load(std::memory_order_acquire);
  if (!p) return;  // deferred and never used (or empty): nothing was taken
  memory_cap_release(bytes_);
#ifdef STRATA_WITH_CUDA
  if (!device_.is_cpu()) {
    cuda::device_free(p, device_.index);
    return;
  }
#endif
  host_free(p, bytes_);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) fail<ShapeError>("negative dimension in shape ", shape_str(s));
    if (__builtin_mul_overflow(n, d, &n)) {
      fail<ShapeError>("shape ", shape_str(s), " has more elements than a 64-bit count can hold");
    }
  }
  return n;
}

size_t shape_bytes(const Shape& shape, int64_t numel, DType dtype) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), dtype_size(dtype), &bytes)) {
    fail<ShapeError>("shape ", shape_str(shape), " of ", dtype_name(dtype), " needs more bytes than memory can address");
  }
  return bytes;
}

namespace {

// Deferred while a MemoryPlan is open on this thread (it keeps the count).
std::shared_ptr<Storage> new_storage(size_t bytes, Device device) {
  MemoryPlan* plan = MemoryPlan::current();
  if (!plan) return std::make_shared<Storage>(bytes, device);
  auto s = std::make_shared<Storage>(bytes, device, Allocation::kDeferred);
  plan->add(s);
  return s;
}

}  // namespace

Tensor::Tensor(const Shape& shape, DType dtype, Device device)
    : shape_(shape), numel_(shape_numel(shape)), dtype_(dtype), device_(device) {
  if (numel_ > 0) storage_ = new_storage(shape_bytes(shape_, numel_, dtype_), device_);
}

int64_t Tensor::dim(int axis) const {
  const int n = ndim();
  const int a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) fail<ShapeError>("axis ", axis, " out of range for shape ", shape_str(shape_));
  return shape_[a];
}

int64_t Tensor::count(int start, int end) const {
  STRATA_CHECK(start >= 0 && start <= end && end <= ndim(), "bad axis range [", start, ", ", end,
               ") for shape ", shape_str(shape_));
  int64_t n = 1;
  for (int i = start; i < end; ++i) n *= shape_[i];
  return n;
}

void Tensor::fail_type(DType accessed_as) const {
  fail<Error>("tensor holds ", dtype_name(dtype_), " but was accessed as ", dtype_name(accessed_as));
}

void Tensor::fail_host_access() const {
  fail<Error>("tensor ", shape_str(shape_), " ", dtype_name(dtype_), " on ", device_.str(),
              " was read from the host with data<T>(), but its memory is on the device; copy it to the host "
              "with .to(Device::cpu()) first, or hand device_data<T>() to CUDA code");
}

void Tensor::reshape(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  if (n != numel_) {
    fail<ShapeError>("cannot reshape ", shape_str(shape_), " (", numel_, " elements) to ",
                     shape_str(shape), " (", n, " elements)");
  }
  shape_ = shape;
}

void Tensor::resize(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  const size_t need = shape_bytes(shape, n, dtype_);
  if (need > capacity_bytes()) {
    storage_ = new_storage(need, device_);
    offset_ = 0;
    view_bytes_ = 0;
  }
  shape_ = shape;
  numel_ = n;
}

bool Tensor::shares_storage_with(const Tensor& o) const {
  if (!storage_ || storage_ != o.storage_) return false;
  return offset_ < o.offset_ + o.capacity_bytes() && o.offset_ < offset_ + capacity_bytes();
}

Tensor Tensor::view_bytes(size_t offset, size_t bytes, const Shape& shape, DType dtype) const {
  const int64_t n = shape_numel(shape);
  const size_t need = shape_bytes(shape, n, dtype);
  if (offset > capacity_bytes() || bytes > capacity_bytes() - offset || need > bytes) {
    fail<ShapeError>("a view of bytes [", offset, ", ", offset + bytes, ") as ", shape_str(shape), " ",
                     dtype_name(dtype), " (", need, " bytes) does not fit in a tensor of ", capacity_bytes(),
                     " bytes");
  }
  Tensor v;
  v.shape_ = shape;
  v.numel_ = n;
  v.dtype_ = dtype;
  v.device_ = device_;
  if (bytes == 0) return v;  // nothing to view: no storage, as an empty tensor
  v.storage_ = storage_;
  v.offset_ = offset_ + offset;
  v.view_bytes_ = bytes;
  return v;
}

void Tensor::zero() {
  if (!nbytes()) return;
  if (!device_.is_cpu()) {
#ifdef STRATA_WITH_CUDA
    cuda::zero_bytes(raw_data(), nbytes(), device_.index);
    return;
#else
    no_cuda(device_);
#endif
  }
  std::memset(raw_data(), 0, nbytes());
}

void Tensor::fill(float value) {
  float* p = device_data<float>();  // either side: the branch below picks the writer
  if (!device_.is_cpu()) {
#ifdef STRATA_WITH_CUDA
    cuda::fill_f32(p, numel_, value, device_.index);
    return;
#else
    no_cuda(device_);
#endif
  }
  for (int64_t i = 0; i < numel_; ++i) p[i] = value;
}

void Tensor::fill_bytes(uint8_t byte) {
  if (!nbytes()) return;
  if (!device_.is_cpu()) {
#ifdef STRATA_WITH_CUDA
    cuda::set_bytes(raw_data(), byte, nbytes(), device_.index);
    return;
#else
    no_cuda(device_);
#endif
  }
  std::memset(raw_data(), byte, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel() != numel_ || src.dtype() != dtype_) {
    fail<ShapeError>("copy_from: source ", shape_str(src.shape()), " ", dtype_name(src.dtype()),
                     " does not match destination ", shape_str(shape_), " ", dtype_name(dtype_));
  }
  if (!nbytes()) return;
  if (device_.is_cpu() && src.device().is_cpu()) {
    std::memcpy(raw_data(), src.raw_data(), nbytes());
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda::copy_bytes(raw_data(), copy_index(device_), src.raw_data(), copy_index(src.device()), nbytes());
#else
  no_cuda(device_.is_cpu() ? src.device() : device_);
#endif
}

void copy_elements(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count) {
  if (src.dtype() != dst.dtype()) {
    fail<ShapeError>("copy_elements: source is ", dtype_name(src.dtype()), " but destination is ",
                     dtype_name(dst.dtype()));
  }
  if (count < 0 || src_offset < 0 || dst_offset < 0 || src_offset > src.numel() - count ||
      dst_offset > dst.numel() - count) {
    fail<ShapeError>("copy_elements: ", count, " elements from offset ", src_offset, " of a source of ", src.numel(),
                     " to offset ", dst_offset, " of a destination of ", dst.numel(), " is out of bounds");
  }
  const size_t elem = dtype_size(dst.dtype());
  copy_bytes(dst, static_cast<size_t>(dst_offset) * elem, src, static_cast<size_t>(src_offset) * elem,
             static_cast<size_t>(count) * elem);
}

void copy_bytes(Tensor& dst, size_t dst_offset, const Tensor& src, size_t src_offset, size_t bytes) {
  if (src_offset > src.nbytes() || bytes > src.nbytes() - src_offset || dst_offset > dst.nbytes() ||
      bytes > dst.nbytes() - dst_offset) {
    fail<ShapeError>("copy_bytes: ", bytes, " bytes from offset ", src_offset, " of a source of ", src.nbytes(),
                     " bytes to offset ", dst_offset, " of a destination of ", dst.nbytes(), " is out of bounds");
  }
  if (bytes == 0) return;
  char* to = static_cast<char*>(dst.raw_data()) + dst_offset;
  const char* from = static_cast<const char*>(src.raw_data()) + src_offset;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(to, from, bytes);
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda::copy_bytes(to, copy_index(dst.device()), from, copy_index(src.device()), bytes);
#else
  no_cuda(dst.device().is_cpu() ? src.device() : dst.device());
#endif
}

void cast_into(Tensor& dst, const Tensor& src) {
  if (src.numel() != dst.numel() || !is_float_dtype(src.dtype()) || !is_float_dtype(dst.dtype())) {
    fail<ShapeError>("cast_into: source ", shape_str(src.shape()), " ", dtype_name(src.dtype()), " and destination ",
                     shape_str(dst.shape()), " ", dtype_name(dst.dtype()),
                     " must have the same element count and be f32, f16 or bf16");
  }
  if (src.device() != dst.device()) {
    fail<ShapeError>("cast_into: source on ", src.device().str(), " and destination on ", dst.device().str(),
                     " must be on the same device");
  }
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
    return;
  }
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (!dst.device().is_cpu()) {
#ifdef STRATA_WITH_CUDA
    cuda::cast_elements(dst.raw_data(), dst.dtype(), src.raw_data(), src.dtype(), n, dst.device().index);
    return;
#else
    no_cuda(dst.device());
#endif
  }
  if (dst.dtype() == DType::kF32) {
    convert_to_f32(src.dtype(), src.raw_data(), static_cast<float*>(dst.raw_data()), n);
  } else if (src.dtype() == DType::kF32) {
    convert_from_f32(dst.dtype(), static_cast<const float*>(src.raw_data()), dst.raw_data(), n);
  } else {  // f16 <-> bf16: through f32, a block at a time
    constexpr int64_t kBlock = 4096;
    float tmp[kBlock];
    const size_t in = dtype_size(src.dtype()), out = dtype_size(dst.dtype());
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      convert_to_f32(src.dtype(), static_cast<const char*>(src.raw_data()) + i * static_cast<int64_t>(in), tmp, m);
      convert_from_f32(dst.dtype(), tmp, static_cast<char*>(dst.raw_data()) + i * static_cast<int64_t>(out), m);
    }
  }
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

}  // namespace strata
