// Gradient buckets of data parallel: which parameters travel together in one
// collective call, and a gradient into or out of a bucket's wire buffer (f32,
// or f16/bf16 with compression). Plain data parallel allreduces each bucket;
// sharded data parallel (sharded_update.h) reduce-scatters it.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/net.h"
#include "framework/tensor.h"
#include "parallel/codec/gradient_codec.h"

namespace strata::parallel {

// A group of parameters whose gradients travel in one collective call.
struct GradBucket {
  std::vector<int> params;        // indices into Net::params(), in readiness order
  std::vector<int64_t> offsets;   // element offset of each parameter in the flat buffer
  int64_t numel = 0;              // total gradient elements
};

// Which updated parameters (learnable, lr_mult > 0) get a bucket.
enum class BucketReach {
  kBackward,    // those a backward pass reaches (the others' gradients stay zero: no need to average them)
  kAllUpdated,  // every one, the unreached in a last bucket of their own (a sharded update updates
                // them on their owner only, weight decay and momentum included)
};

// Buckets of at most bucket_bytes of f32 gradients (a single parameter larger
// than that gets a bucket of its own), filled in the order the gradients
// become final in backward. Parameters that are not updated (not learnable,
// lr_mult == 0) are left out, and with kBackward those no backward reaches.
std::vector<GradBucket> assign_buckets(const Net& net, size_t bucket_bytes, BucketReach reach = BucketReach::kBackward);

// One bucket holding the parameters of `buckets` in their order.
GradBucket merge_buckets(const std::vector<GradBucket>& buckets);

// grad (f32, host or device) -> buf[offset, offset + grad.numel()) in buf's
// dtype, multiplied by `scale`; buf lives on the host or on grad's device
// (compression needs a host buf). `staging` is host f32 scratch.
void encode_gradient(const Tensor& grad, float scale, GradCompression compression, Tensor& buf, int64_t offset,
                     Tensor& staging);
// buf[offset, offset + grad.numel()) -> grad (f32), the inverse of encode_gradient with scale 1.
void decode_gradient(const Tensor& buf, int64_t offset, GradCompression compression, Tensor& grad, Tensor& staging);

}  // namespace strata::parallel
