// Net: the parameter gradients in one flat buffer (BlobMemory::kByLifetime
// and its checked mode).
//
// The gradients of the updated parameters (learnable, lr_mult != 0) are laid
// out one after another in the order backward finishes them (descending
// last_backward_layer, ties by index; those no backward reaches last), each
// at a 256-byte boundary, and each parameter's diff becomes a view of its
// place. That is data parallel's bucket order (parallel/data_parallel/
// grad_buckets.cpp), so a bucket is one range of the buffer and is reduced
// in place (gradient_view) instead of being copied into a buffer of its own
// and back; zero_param_diffs() zeroes the whole buffer in one pass.
#include <algorithm>

#include "framework/error.h"
#include "framework/net.h"

namespace strata {
namespace {

constexpr int64_t kGradAlignment = 64;  // floats: 256 bytes, as the blob arena

int64_t align_up(int64_t v) { return (v + kGradAlignment - 1) / kGradAlignment * kGradAlignment; }

bool updated(const NetParam& p) { return p.learnable == Learnable::kYes && p.lr_mult != 0.0f; }

}  // namespace

void Net::plan_gradients() {
  std::vector<int> order, unreached;
  // A net nobody runs backward on (inference, a TEST net) writes no gradient.
  const bool backward = options_.phase == Phase::kTrain || force_backward_;
  if (options_.blob_memory != BlobMemory::kSeparate && backward) {
    for (int id = 0; id < static_cast<int>(params_.size()); ++id) {
      if (!updated(params_[id])) continue;
      (params_[id].last_backward_layer >= 0 ? order : unreached).push_back(id);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return params_[a].last_backward_layer > params_[b].last_backward_layer;
    });
    order.insert(order.end(), unreached.begin(), unreached.end());
  }
  std::vector<int64_t> offsets(params_.size(), -1);
  int64_t total = 0;
  for (int id : order) {
    offsets[id] = total;
    total = align_up(total + params_[id].blob->numel());
  }
  flat_grads_ = total > 0 ? Tensor(Shape{total}, DType::kF32, options_.device) : Tensor();
  for (size_t id = 0; id < params_.size(); ++id) {
    Tensor& diff = params_[id].blob->diff;
    const bool was_flat = !grad_offsets_.empty() && grad_offsets_[id] >= 0;
    if (offsets[id] < 0 && !was_flat) continue;  // keeps the storage it has
    Tensor place = offsets[id] >= 0 ? flat_grads_.view_bytes(static_cast<size_t>(offsets[id]) * sizeof(float),
                                                             diff.nbytes(), diff.shape(), DType::kF32)
                                    : Tensor(diff.shape(), DType::kF32, options_.device);
    // What the gradient holds moves with it (zero at setup; whatever a
    // policy's set_lr_mult finds between steps), never an allocation's worth
    // of zeros copied for nothing.
    if (diff.holds_memory() && diff.numel() > 0) place.copy_from(diff);
    diff = place;
  }
  grad_offsets_ = offsets;
}

std::optional<Tensor> Net::gradient_view(const std::vector<int>& ids) const {
  if (ids.empty() || grad_offsets_.empty() || flat_grads_.numel() == 0) return std::nullopt;
  int64_t end = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    STRATA_CHECK(ids[k] >= 0 && ids[k] < static_cast<int>(params_.size()), "param index ", ids[k], " out of range");
    const int64_t off = grad_offsets_[static_cast<size_t>(ids[k])];
    if (off < 0 || (k > 0 && off != align_up(end))) return std::nullopt;
    end = off + params_[static_cast<size_t>(ids[k])].blob->numel();
  }
  const int64_t begin = grad_offsets_[static_cast<size_t>(ids[0])];
  return flat_grads_.view_bytes(static_cast<size_t>(begin) * sizeof(float),
                                static_cast<size_t>(end - begin) * sizeof(float), {end - begin}, DType::kF32);
}

}  // namespace strata
