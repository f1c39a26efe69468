// How sharded data parallel (sharded_update.h) slices the parameters: every
// gradient bucket's flattened parameters are cut into world_size contiguous
// slices of `block` = ceil(numel / world) elements, and rank r owns slice r
// of every bucket. The formula uses only (numel, rank, world), so every rank
// computes every rank's slices alike and nothing is exchanged to agree.
//
//   a bucket of 10 elements over 3 ranks (block 4; the wire buffer holds 12):
//     | rank 0: 0..3 | rank 1: 4..7 | rank 2: 8..9 (+ 2 padding) |
//
// With one bucket (overlap off) a rank owns one contiguous slice of all the
// parameters; with several, one per bucket, so that each bucket can be
// reduce-scattered as soon as backward has finished it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/net.h"
#include "parallel/data_parallel/grad_buckets.h"

namespace strata::parallel {

// Elements [begin, end) of a flat range.
struct SliceRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Elements each rank's slice is padded to: ceil(numel / world) (0 for none).
int64_t shard_block(int64_t numel, int world);
// Rank r's slice of numel elements: [r * block, (r + 1) * block) cut at numel
// (the last ranks' slices may be shorter or empty).
SliceRange shard_range(int64_t numel, int rank, int world);

// A run of one parameter's elements inside a rank's slice of a bucket.
struct ShardPiece {
  int param = -1;            // index into Net::params()
  int64_t param_offset = 0;  // first element inside the parameter
  int64_t slice_offset = 0;  // first element inside the rank's slice
  int64_t count = 0;
};

// One rank's share of one bucket.
struct BucketShard {
  int64_t block = 0;  // shard_block(bucket.numel, world)
  SliceRange range;   // the rank's elements of the bucket
  std::vector<ShardPiece> pieces;  // in bucket order, covering `range` exactly
};

BucketShard shard_bucket(const GradBucket& bucket, const std::vector<NetParam>& params, int rank, int world);

// The slicing as printed at the start of a run, one line per bucket (the
// first `max_lines`, then a count):
//   "bucket 0 (199 values): rank 0 [0, 67) fc2.weight..fc1.weight, rank 1 [67, 134) fc1.weight, ..."
std::string describe_slicing(const std::vector<GradBucket>& buckets, const std::vector<NetParam>& params, int world,
                             size_t max_lines = 8);

}  // namespace strata::parallel
