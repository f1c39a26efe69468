// Layout conversions on the CPU (the GPU's: framework/cuda/layout.cu): each
// image widened to f32, transposed, and narrowed once.
#include "framework/layout.h"

#include <vector>

#include "framework/cuda/device_api.h"
#include "framework/error.h"

namespace strata {

const char* layout_name(Layout l) { return l == Layout::kNHWC ? "NHWC" : "NCHW"; }

void convert_layout_into(Tensor& dst, Layout dst_layout, const Tensor& src, Layout src_layout, bool accumulate) {
  if (src.numel() != dst.numel() || !is_float_dtype(src.dtype()) || !is_float_dtype(dst.dtype()) ||
      (accumulate && dst.dtype() != DType::kF32)) {
    fail<ShapeError>("convert_layout_into: source ", shape_str(src.shape()), " ", dtype_name(src.dtype()),
                     " and destination ", shape_str(dst.shape()), " ", dtype_name(dst.dtype()),
                     " must have the same element count and be f32, f16 or bf16 (f32 to add into)");
  }
  if (src.device() != dst.device()) {
    fail<ShapeError>("convert_layout_into: source on ", src.device().str(), " and destination on ",
                     dst.device().str(), " must be on the same device");
  }
  const Shape& s = src.shape();
  const int64_t n = s.size() >= 2 ? s[0] : 1;
  const int64_t c = s.size() >= 2 ? s[1] : 1;
  const int64_t spatial = n * c > 0 ? src.numel() / (n * c) : 0;
  if (!accumulate && (dst_layout == src_layout || spatial == 1 || c == 1)) {
    cast_into(dst, src);  // the same order of elements
    return;
  }
  if (src.numel() == 0) return;
  const bool to_nhwc = dst_layout == Layout::kNHWC;
  const bool transpose = src_layout != dst_layout;
  if (!dst.device().is_cpu()) {
#ifdef STRATA_WITH_CUDA
    if (transpose) {
      cuda::convert_layout(dst.raw_data(), dst.dtype(), src.raw_data(), src.dtype(), n, c, spatial, to_nhwc, accumulate,
                           dst.device().index);
    } else if (src.dtype() == DType::kF32) {  // accumulate in one layout
      cuda::axpy_f32(src.numel(), 1.0f, static_cast<const float*>(src.raw_data()), static_cast<float*>(dst.raw_data()),
                     dst.device().index);
    } else {
      fail<ShapeError>("convert_layout_into: adds a ", dtype_name(src.dtype()), " tensor on ", dst.device().str(),
                       " only from the other layout");
    }
    return;
#else
    fail<Error>("convert_layout_into: ", dst.device().str(), " needs a build with CUDA");
#endif
  }
  const int64_t image = c * spatial;
  const int64_t rows = to_nhwc ? c : spatial;  // src [rows][cols] -> dst [cols][rows]
  const int64_t cols = to_nhwc ? spatial : c;
  const size_t in_size = dtype_size(src.dtype()), out_size = dtype_size(dst.dtype());
  const char* in = static_cast<const char*>(src.raw_data());
  char* out = static_cast<char*>(dst.raw_data());
  std::vector<float> wide(static_cast<size_t>(image)), moved(static_cast<size_t>(image));
  for (int64_t i = 0; i < n; ++i) {
    convert_to_f32(src.dtype(), in + static_cast<size_t>(i * image) * in_size, wide.data(), image);
    if (transpose) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t q = 0; q < cols; ++q) moved[static_cast<size_t>(q * rows + r)] = wide[static_cast<size_t>(r * cols + q)];
      }
    } else {
      moved.swap(wide);
    }
    char* o = out + static_cast<size_t>(i * image) * out_size;
    if (accumulate) {
      float* acc = reinterpret_cast<float*>(o);
      for (int64_t k = 0; k < image; ++k) acc[k] += moved[static_cast<size_t>(k)];
    } else {
      convert_from_f32(dst.dtype(), moved.data(), o, image);
    }
  }
}

}  // namespace strata
