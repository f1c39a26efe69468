#include "parallel/data_parallel/grad_buckets.h"

#include <algorithm>

#include "framework/dtype.h"
#include "framework/solver/optimizer.h"

namespace strata::parallel {

std::vector<GradBucket> assign_buckets(const Net& net, size_t bucket_bytes, BucketReach reach) {
  const std::vector<NetParam>& params = net.params();
  // Backward runs from the last layer down; a parameter's gradient is final
  // after its last_backward_layer, so that order (descending) is the readiness order.
  std::vector<int> order, unreached;
  for (int id = 0; id < static_cast<int>(params.size()); ++id) {
    if (!is_updated(params[id])) continue;
    if (params[id].last_backward_layer >= 0) {
      order.push_back(id);
    } else if (reach == BucketReach::kAllUpdated) {
      unreached.push_back(id);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return params[a].last_backward_layer > params[b].last_backward_layer;
  });
  std::vector<GradBucket> buckets;
  size_t bytes = 0;
  auto add = [&](int id, bool new_bucket) {
    if (new_bucket) {
      buckets.emplace_back();
      bytes = 0;
    }
    GradBucket& b = buckets.back();
    b.params.push_back(id);
    b.offsets.push_back(b.numel);
    b.numel += params[id].blob->numel();
    bytes += static_cast<size_t>(params[id].blob->numel()) * sizeof(float);
  };
  for (int id : order) {
    const size_t b = static_cast<size_t>(params[id].blob->numel()) * sizeof(float);
    add(id, buckets.empty() || (bytes > 0 && bytes + b > bucket_bytes));
  }
  for (size_t i = 0; i < unreached.size(); ++i) add(unreached[i], i == 0);
  return buckets;
}

GradBucket merge_buckets(const std::vector<GradBucket>& buckets) {
  GradBucket all;
  for (const GradBucket& b : buckets) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      all.params.push_back(b.params[k]);
      all.offsets.push_back(all.numel + b.offsets[k]);
    }
    all.numel += b.numel;
  }
  return all;
}

void encode_gradient(const Tensor& grad, float scale, GradCompression compression, Tensor& buf, int64_t offset,
                     Tensor& staging) {
  const int64_t n = grad.numel();
  char* dst = buf.device().is_cpu() ? static_cast<char*>(buf.raw_data()) + offset * dtype_size(buf.dtype()) : nullptr;
  if (grad.device().is_cpu() && buf.device().is_cpu()) {
    encode_gradients(grad.data<float>(), n, scale, compression, dst);
    return;
  }
  if (compression == GradCompression::kNone && scale == 1.0f) {
    copy_elements(buf, offset, grad, 0, n);  // device -> host bucket, or device -> device bucket
    return;
  }
  // A GPU gradient into a compressed (or scaled) host bucket: through host f32 staging.
  staging.resize({n});
  copy_elements(staging, 0, grad, 0, n);
  encode_gradients(staging.data<float>(), n, scale, compression, dst);
}

void decode_gradient(const Tensor& buf, int64_t offset, GradCompression compression, Tensor& grad, Tensor& staging) {
  const int64_t n = grad.numel();
  if (compression == GradCompression::kNone) {
    copy_elements(grad, 0, buf, offset, n);  // any pair of places
    return;
  }
  const char* src = static_cast<const char*>(buf.raw_data()) + offset * dtype_size(buf.dtype());
  if (grad.device().is_cpu()) {
    decode_gradients(src, n, compression, grad.data<float>());
    return;
  }
  staging.resize({n});
  decode_gradients(src, n, compression, staging.data<float>());
  copy_elements(grad, 0, staging, 0, n);
}

}  // namespace strata::parallel
