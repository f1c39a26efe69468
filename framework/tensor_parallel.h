// Tensor parallelism (Megatron-style), the parts shared by the split layers
// (InnerProduct `split: COLUMN | ROW`, Convolution `split: OUTPUT_CHANNELS`,
// MultiHeadAttention `split: HEADS`) and by checkpoints.
//
// A split layer holds one block of each split parameter (Layer::param_shard
// says which) and talks to the other ranks of its tensor-parallel group
// through LayerContext::comm. A parameter that is not split is replicated:
// every rank of the group holds it whole and, because the split layers make
// their outputs and input gradients identical on every rank, computes the
// same gradient for it. Blocks are equal slices along one axis; rank r of
// the group holds block r.
#pragma once

#include <cstdint>
#include <string>

#include "framework/filler.h"
#include "framework/layer.h"
#include "framework/rng.h"
#include "framework/tensor.h"

namespace strata {

class Communicator;

// The group a layer splits over. Without a communicator, or with a world of
// one rank, layers run unsplit.
struct TpGroup {
  Communicator* comm = nullptr;
  int size = 1;
  int rank = 0;
  bool active() const { return size > 1; }
};
TpGroup tp_group(Communicator* comm);

// The ParamShard of a parameter split along `axis` over `group`.
ParamShard shard_of(const TpGroup& group, int axis, int segments = 1);

// Shape of the block `s` of a tensor of shape `full` (ShapeError naming
// `what` when full[axis] is not divisible by the parts), and back.
Shape shard_shape(const Shape& full, const ParamShard& s, const std::string& what);
Shape full_shape(const Shape& shard, const ParamShard& s);

// Block copies (f32) between a full tensor of shape `full` and block
// `index` of `parts` equal blocks along `axis`.
void copy_block_out(const float* full, const Shape& full_shape, int axis, int parts, int index, float* block);
void copy_block_in(const float* block, const Shape& full_shape, int axis, int parts, int index, float* full);

// The same for a ParamShard (its segments included).
void copy_shard_out(const float* full, const Shape& full_shape, const ParamShard& s, float* block);
void copy_shard_in(const float* block, const Shape& full_shape, const ParamShard& s, float* full);

// The same for f32 tensors wherever they live (host, or one CUDA device for
// both; 2-D copies there, queued on its compute stream): the block of
// `full` into `block` (already of the block's size), and back.
void copy_block_out(const Tensor& full, int axis, int parts, int index, Tensor& block);
void copy_block_in(const Tensor& block, int axis, int parts, int index, Tensor& full);

// This rank's block of `full`, as a new host tensor.
Tensor slice_shard(const Tensor& full, const ParamShard& s);
// The full tensor, assembled from every rank's block, as a host tensor (the
// block may live on a CUDA device: it is gathered there). Collective over
// s.comm: every rank of the group calls it with its block, in the same order
// relative to the group's other collectives. Without a split, a copy.
Tensor gather_shard(const Tensor& shard, const ParamShard& s);

// Fills a split parameter exactly as the unsplit layer fills the whole
// tensor (the same draws from `rng`), then keeps this rank's block: a split
// net starts from the same weights as an unsplit one with the same seed.
void fill_shard(const FillerSpec& spec, Tensor& shard, const ParamShard& s, Rng& rng);

// Allgathers `local` (this rank's block along `axis` of a tensor of shape
// `full_shape`) into `full`; `scratch` holds the gathered blocks (it is
// moved to local's device when it lives elsewhere). On the host or on one
// CUDA device: the collective then runs on device memory.
void allgather_blocks(const TpGroup& group, const Tensor& local, const Shape& full_shape, int axis,
                      Tensor& scratch, Tensor& full);

}  // namespace strata
