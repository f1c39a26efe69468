#include "parallel/estimate/data_parallel_cost.h"

#include <algorithm>

#include "framework/error.h"

namespace strata::estimate {

std::vector<GradientBucket> gradient_buckets(const StepProfile& profile, double bucket_bytes) {
  STRATA_CHECK(bucket_bytes > 0, "bucket size must be positive, got ", bucket_bytes);
  std::vector<GradientBucket> buckets;
  double elapsed = 0.0;
  for (int i = static_cast<int>(profile.layers.size()) - 1; i >= 0; --i) {
    const LayerProfile& layer = profile.layers[i];
    elapsed += layer.backward;
    if (layer.grad_bytes <= 0) continue;
    // As chunk_params: a new bucket when the current one would overflow.
    if (buckets.empty() || (buckets.back().bytes > 0 && buckets.back().bytes + layer.grad_bytes > bucket_bytes)) {
      buckets.emplace_back();
    }
    buckets.back().bytes += layer.grad_bytes;
    buckets.back().ready = elapsed;
  }
  return buckets;
}

StepEstimate data_parallel_step(const StepProfile& profile, int workers, const Link& link,
                                const DataParallelOptions& options) {
  STRATA_CHECK(workers >= 1, "workers must be >= 1, got ", workers);
  StepEstimate e;
  e.workers = workers;
  e.samples = static_cast<double>(workers) * profile.batch;
  const double forward = profile.forward_seconds();
  const double backward = profile.backward_seconds();
  const double scale = options.wire_bytes_per_gradient_byte;
  if (workers == 1) {
    e.step = forward + backward;  // one process reduces nothing
    return e;
  }
  // A bucket's collective: the allreduce, or a sharded run's ring
  // reduce-scatter (hierarchical servers are not modelled for it).
  auto reduce = [&](double bytes) {
    return options.reduce_scatter ? ring_reduce_scatter_seconds(workers, bytes, link)
                                  : allreduce_seconds(options.algorithm, workers, bytes, link, options.nodes);
  };
  if (options.overlap == parallel::Overlap::kOff) {
    e.communication = reduce(profile.grad_bytes() * scale);
    e.step = forward + backward + e.communication;
    e.exposed = e.communication;
    return e;
  }
  double wire_free = 0.0;
  for (const GradientBucket& b : gradient_buckets(profile, options.bucket_bytes)) {
    const double t = reduce(b.bytes * scale);
    wire_free = std::max(wire_free, b.ready) + t;
    e.communication += t;
  }
  e.step = forward + std::max(backward, wire_free);
  e.exposed = e.step - forward - backward;
  return e;
}

}  // namespace strata::estimate
