#include "framework/tensor_parallel.h"

#include <cstring>

#include "framework/communicator.h"
#include "framework/error.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

TpGroup tp_group(Communicator* comm) {
  TpGroup g;
  if (comm && comm->world_size() > 1) {
    g.comm = comm;
    g.size = comm->world_size();
    g.rank = comm->rank();
  }
  return g;
}

ParamShard shard_of(const TpGroup& group, int axis, int segments) {
  ParamShard s;
  if (!group.active()) return s;
  s.axis = axis;
  s.segments = segments;
  s.parts = group.size;
  s.index = group.rank;
  s.comm = group.comm;
  return s;
}

Shape shard_shape(const Shape& full, const ParamShard& s, const std::string& what) {
  if (!s.split()) return full;
  STRATA_CHECK(s.axis >= 0 && s.axis < static_cast<int>(full.size()), what, ": shard axis ", s.axis,
               " is out of range for ", shape_str(full));
  if (full[s.axis] % (static_cast<int64_t>(s.parts) * s.segments) != 0) {
    fail<ShapeError>(what, ": dimension ", s.axis, " of ", shape_str(full), " (", full[s.axis],
                     s.segments > 1 ? " in " + std::to_string(s.segments) + " segments" : std::string(),
                     ") is not divisible by the tensor-parallel size ", s.parts,
                     "; choose sizes divisible by it or a smaller tensor { size }");
  }
  Shape out = full;
  out[s.axis] /= s.parts;
  return out;
}

Shape full_shape(const Shape& shard, const ParamShard& s) {
  if (!s.split()) return shard;
  Shape out = shard;
  out[s.axis] *= s.parts;
  return out;
}

namespace {

struct BlockGeometry {
  int64_t outer = 1;  // product of the dims before the axis
  int64_t block = 0;  // floats of one block within one outer index
  int64_t row = 0;    // floats of the full tensor within one outer index
};

BlockGeometry geometry(const Shape& full, int axis, int parts) {
  BlockGeometry g;
  int64_t inner = 1;
  for (int i = 0; i < axis; ++i) g.outer *= full[i];
  for (size_t i = static_cast<size_t>(axis) + 1; i < full.size(); ++i) inner *= full[i];
  g.row = full[axis] * inner;
  g.block = full[axis] / parts * inner;
  return g;
}

// `rows` rows of `row_bytes` at the given pitches, on the host or within one
// CUDA device (device -1: host).
void copy_rows_on(int device, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                  size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  if (device < 0) {
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
    }
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda::copy_rows(dst, device, dst_pitch, src, device, src_pitch, row_bytes, rows);
#else
  fail<Error>("tensor-parallel block copy on cuda:", device, " in a build without CUDA");
#endif
}

// The device both tensors live on (-1: the host); Error when they differ.
int common_device(const Tensor& a, const Tensor& b, const char* what) {
  if (a.device() != b.device()) {
    fail<Error>(what, ": the tensors live on ", a.device().str(), " and ", b.device().str(),
                "; tensor-parallel block copies work within one device");
  }
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32) {
    fail<Error>(what, ": tensor-parallel block copies take f32 tensors, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  }
  return a.device().is_cpu() ? -1 : a.device().index;
}

}  // namespace

void copy_block_out(const Tensor& full, int axis, int parts, int index, Tensor& block) {
  const int device = common_device(full, block, "copy_block_out");
  const BlockGeometry g = geometry(full.shape(), axis, parts);
  STRATA_CHECK(block.numel() == g.outer * g.block, "copy_block_out: the block has ", block.numel(),
               " elements, expected ", g.outer * g.block);
  const size_t f = sizeof(float);
  copy_rows_on(device, block.raw_data(), f * g.block, static_cast<const char*>(full.raw_data()) + f * index * g.block,
               f * g.row, f * g.block, static_cast<size_t>(g.outer));
}

void copy_block_in(const Tensor& block, int axis, int parts, int index, Tensor& full) {
  const int device = common_device(full, block, "copy_block_in");
  const BlockGeometry g = geometry(full.shape(), axis, parts);
  STRATA_CHECK(block.numel() == g.outer * g.block, "copy_block_in: the block has ", block.numel(),
               " elements, expected ", g.outer * g.block);
  const size_t f = sizeof(float);
  copy_rows_on(device, static_cast<char*>(full.raw_data()) + f * index * g.block, f * g.row, block.raw_data(),
               f * g.block, f * g.block, static_cast<size_t>(g.outer));
}

void copy_block_out(const float* full, const Shape& full_shape, int axis, int parts, int index, float* block) {
  const BlockGeometry g = geometry(full_shape, axis, parts);
  if (g.block == 0) return;
  for (int64_t o = 0; o < g.outer; ++o) {
    std::memcpy(block + o * g.block, full + o * g.row + index * g.block, sizeof(float) * g.block);
  }
}

void copy_block_in(const float* block, const Shape& full_shape, int axis, int parts, int index, float* full) {
  const BlockGeometry g = geometry(full_shape, axis, parts);
  if (g.block == 0) return;
  for (int64_t o = 0; o < g.outer; ++o) {
    std::memcpy(full + o * g.row + index * g.block, block + o * g.block, sizeof(float) * g.block);
  }
}

namespace {

// The full shape with the split axis as [segments, length / segments], and
// the axis of the second: segment blocks are then plain blocks.
Shape segment_view(const Shape& full, const ParamShard& s, int* axis) {
  *axis = s.axis;
  if (s.segments <= 1) return full;
  Shape v(full.begin(), full.begin() + s.axis);
  v.push_back(s.segments);
  v.push_back(full[s.axis] / s.segments);
  v.insert(v.end(), full.begin() + s.axis + 1, full.end());
  *axis = s.axis + 1;
  return v;
}

}  // namespace

void copy_shard_out(const float* full, const Shape& full_shape, const ParamShard& s, float* block) {
  int axis = 0;
  const Shape view = segment_view(full_shape, s, &axis);
  copy_block_out(full, view, axis, s.parts, s.index, block);
}

void copy_shard_in(const float* block, const Shape& full_shape, const ParamShard& s, float* full) {
  int axis = 0;
  const Shape view = segment_view(full_shape, s, &axis);
  copy_block_in(block, view, axis, s.parts, s.index, full);
}

Tensor slice_shard(const Tensor& full, const ParamShard& s) {
  const Tensor host = full.to(Device::cpu());
  if (!s.split()) return host.clone();
  Tensor out(shard_shape(host.shape(), s, "slicing a tensor-parallel parameter"));
  copy_shard_out(host.data<float>(), host.shape(), s, out.data<float>());
  return out;
}

Tensor gather_shard(const Tensor& shard, const ParamShard& s) {
  if (!s.split()) return shard.clone();
  STRATA_CHECK(s.comm && s.comm->world_size() == s.parts && s.comm->rank() == s.index,
               "a tensor-parallel parameter's shard does not match its communicator");
  const Shape full = full_shape(shard.shape(), s);
  // Gathered where the shard lives (a GPU's communicator moves device
  // memory), assembled on the host.
  Tensor blocks({shard.numel() * s.parts}, shard.dtype(), shard.device());
  s.comm->allgather(shard, blocks);
  const Tensor host = blocks.to(Device::cpu());
  Tensor out(full);
  for (int p = 0; p < s.parts; ++p) {
    ParamShard block = s;
    block.index = p;
    copy_shard_in(host.data<float>() + p * shard.numel(), full, block, out.data<float>());
  }
  return out;
}

void fill_shard(const FillerSpec& spec, Tensor& shard, const ParamShard& s, Rng& rng) {
  if (!s.split()) {
    fill(spec, shard, rng);
    return;
  }
  Tensor full(full_shape(shard.shape(), s));
  fill(spec, full, rng);
  copy_shard_out(full.data<float>(), full.shape(), s, shard.data<float>());
}

void allgather_blocks(const TpGroup& group, const Tensor& local, const Shape& full_shape, int axis,
                      Tensor& scratch, Tensor& full) {
  STRATA_CHECK(full.shape() == full_shape, "allgather_blocks: the output is ", shape_str(full.shape()),
               ", expected ", shape_str(full_shape));
  if (scratch.device() != local.device() || scratch.dtype() != local.dtype()) {
    scratch = Tensor({local.numel() * group.size}, local.dtype(), local.device());
  } else {
    scratch.resize({local.numel() * group.size});
  }
  group.comm->allgather(local, scratch);
  const int device = common_device(scratch, full, "allgather_blocks");
  const BlockGeometry g = geometry(full_shape, axis, group.size);
  const size_t f = sizeof(float);
  // Rank p's block is the p-th contiguous run of scratch.
  for (int p = 0; p < group.size; ++p) {
    copy_rows_on(device, static_cast<char*>(full.raw_data()) + f * p * g.block, f * g.row,
                 static_cast<const char*>(scratch.raw_data()) + f * p * local.numel(), f * g.block, f * g.block,
                 static_cast<size_t>(g.outer));
  }
}

}  // namespace strata
