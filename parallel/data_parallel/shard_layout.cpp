#include "parallel/data_parallel/shard_layout.h"

#include <algorithm>

#include "framework/error.h"

namespace strata::parallel {

int64_t shard_block(int64_t numel, int world) {
  STRATA_CHECK(world >= 1 && numel >= 0, "shard_block: numel ", numel, ", world ", world);
  return (numel + world - 1) / world;
}

SliceRange shard_range(int64_t numel, int rank, int world) {
  STRATA_CHECK(rank >= 0 && rank < world, "shard_range: rank ", rank, " of ", world);
  const int64_t block = shard_block(numel, world);
  SliceRange r;
  r.begin = std::min(numel, block * rank);
  r.end = std::min(numel, block * (rank + 1));
  return r;
}

BucketShard shard_bucket(const GradBucket& bucket, const std::vector<NetParam>& params, int rank, int world) {
  BucketShard s;
  s.block = shard_block(bucket.numel, world);
  s.range = shard_range(bucket.numel, rank, world);
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const int64_t begin = bucket.offsets[k];
    const int64_t end = begin + params[bucket.params[k]].blob->numel();
    const int64_t lo = std::max(begin, s.range.begin);
    const int64_t hi = std::min(end, s.range.end);
    if (lo >= hi) continue;
    s.pieces.push_back(ShardPiece{bucket.params[k], lo - begin, lo - s.range.begin, hi - lo});
  }
  return s;
}

std::string describe_slicing(const std::vector<GradBucket>& buckets, const std::vector<NetParam>& params, int world,
                             size_t max_lines) {
  std::string out;
  for (size_t b = 0; b < buckets.size() && b < max_lines; ++b) {
    out += (b ? "\n" : "") + std::string("  bucket ") + std::to_string(b) + " (" + std::to_string(buckets[b].numel) +
           " values):";
    for (int r = 0; r < world; ++r) {
      const BucketShard s = shard_bucket(buckets[b], params, r, world);
      out += std::string(r ? "," : "") + " rank " + std::to_string(r) + " [" + std::to_string(s.range.begin) + ", " +
             std::to_string(s.range.end) + ")";
      if (!s.pieces.empty()) {
        out += " " + params[s.pieces.front().param].name;
        if (s.pieces.size() > 1) out += ".." + params[s.pieces.back().param].name;
      }
    }
  }
  if (buckets.size() > max_lines) out += "\n  ... (" + std::to_string(buckets.size() - max_lines) + " more buckets)";
  return out;
}

}  // namespace strata::parallel
