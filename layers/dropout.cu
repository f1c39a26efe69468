// Dropout on the GPU: the mask comes from a counter-based hash of (a seed
// drawn from the layer's rng_ per forward, element index), so it needs no
// per-thread generator state, is the same for any launch geometry, and a
// resumed run (rng_ restored) draws the same masks. It differs from the CPU
// layer's mask; both keep each element with probability 1 - ratio.
#include <memory>
#include <vector>

#include "framework/cuda/device_api.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/dropout.h"
#include "layers/neuron_layer.cuh"  // neuron_load/neuron_store, with_device_element

namespace strata {

namespace {

__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// T: the blobs' element type (float, __nv_bfloat16, __half); the scaling in f32.
// seed_slot, when set (a replayed step), holds the seed instead of `seed`.
// NHWC (channels > 0): element i's draw follows its NCHW index, so the mask
// is the NCHW call's; the mask itself is kept in memory order.
template <class T>
__global__ void dropout_forward(int64_t n, uint64_t seed, const uint64_t* seed_slot, float keep, float scale,
                                int64_t channels, int64_t spatial, const T* x, T* y, uint8_t* mask) {
  if (seed_slot) seed = *seed_slot;
  STRATA_CUDA_LOOP(i, n) {
    int64_t at = i;
    if (channels > 0) {
      const int64_t c = i % channels, rest = i / channels;  // rest = image * spatial + pixel
      at = ((rest / spatial) * channels + c) * spatial + rest % spatial;
    }
    // 24 random bits, as Rng::uniform() on the CPU.
    const uint64_t r = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(at)));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    const uint8_t m = u < keep ? 1 : 0;
    mask[i] = m;
    y[i] = neuron_store<T>(m ? neuron_load(x[i]) * scale : 0.0f);
  }
}

template <class T>
__global__ void dropout_backward(int64_t n, float scale, const uint8_t* mask, const T* dy, T* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = neuron_store<T>(mask[i] ? neuron_load(dy[i]) * scale : 0.0f);
}

}  // namespace

// The seeds on their way to the device: pinned, so that queuing one never
// waits for the device, in a ring whose slot is reused only once its copy
// has run (the host is never more than a few steps ahead).
struct DropoutLayer::SeedRing {
  static constexpr int kSlots = 8;
  explicit SeedRing(int index) : host(static_cast<uint64_t*>(cuda::pinned_alloc(sizeof(uint64_t) * kSlots))) {
    for (int s = 0; s < kSlots; ++s) copied.push_back(std::make_unique<cuda::StreamMark>(index));
  }
  ~SeedRing() {
    try {
      for (auto& m : copied) m->wait();  // a copy still queued reads `host`
    } catch (...) {
      return;  // the device failed: leave the pinned block rather than free what a copy may read
    }
    cuda::pinned_free(host);
  }
  SeedRing(const SeedRing&) = delete;
  SeedRing& operator=(const SeedRing&) = delete;
  uint64_t* host;
  std::vector<std::unique_ptr<cuda::StreamMark>> copied;
  int next = 0;
};

void DropoutLayer::before_replay() {
  if (is_identity()) return;
  // The draw forward makes eagerly, queued behind the replays before it.
  const uint64_t seed = rng_.next_u64();
  cuda::ensure_on_device(seed_slot_, {static_cast<int64_t>(sizeof seed)}, DType::kU8, device());
  if (!seeds_) seeds_ = std::make_shared<SeedRing>(device().index);
  SeedRing& r = *seeds_;
  const int s = r.next;
  r.next = (r.next + 1) % SeedRing::kSlots;
  r.copied[static_cast<size_t>(s)]->wait();  // its last copy has run (long since)
  r.host[s] = seed;
  cuda::copy_to_device_queued(seed_slot_.raw_data(), &r.host[s], sizeof seed, device().index);
  r.copied[static_cast<size_t>(s)]->record();
}

void DropoutLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  check_same_storage("Dropout forward", {&x, &y});
  const int64_t n = x.numel();
  if (is_identity()) {
    if (!y.shares_storage_with(x)) y.copy_from(x);  // any dtype; queued on the compute stream
    return;
  }
  cuda::ensure_on_device(mask_, bottom[0]->shape(), DType::kU8, device());
  // One draw per forward, even for an empty batch, so the RNG stream does
  // not depend on batch sizes. Captured, the replay reads the seed
  // before_replay() queued.
  const bool captured = cuda::capturing();
  STRATA_CHECK(!captured || seed_slot_.numel() == sizeof(uint64_t), where(),
               ": captured into a step graph without before_replay() first");
  const uint64_t seed = captured ? 0 : rng_.next_u64();
  const uint64_t* seed_slot = captured ? reinterpret_cast<const uint64_t*>(seed_slot_.device_data<uint8_t>()) : nullptr;
  if (n == 0) return;
  const ChannelsLastIndex cl = channels_last_index(x.shape());
  with_device_element(x.dtype(), "Dropout forward", [&](auto e) {
    using T = decltype(e);
    dropout_forward<T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, seed, seed_slot, 1.0f - ratio_, scale_, cl.channels, cl.spatial, static_cast<const T*>(x.raw_data()),
        static_cast<T*>(y.raw_data()), mask_.device_data<uint8_t>());
    STRATA_KERNEL_CHECK();
  });
}

void DropoutLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& dy = top[0]->diff;
  Tensor& dx = bottom[0]->diff;
  check_same_storage("Dropout backward", {&dy, &dx});
  const int64_t n = dy.numel();
  if (is_identity()) {
    if (!dx.shares_storage_with(dy)) dx.copy_from(dy);
    return;
  }
  STRATA_CHECK(mask_.numel() == n, "Dropout backward before forward (mask has ", mask_.numel(),
               " elements, gradient has ", n, ")");
  if (n == 0) return;
  with_device_element(dy.dtype(), "Dropout backward", [&](auto e) {
    using T = decltype(e);
    dropout_backward<T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, scale_, mask_.device_data<uint8_t>(), static_cast<const T*>(dy.raw_data()), static_cast<T*>(dx.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
