// The CUDA runtime: the caching allocator's cache logic (over a fake
// device, so it runs everywhere), and on a GPU the device storage, copies,
// fill/zero and allocator reuse of real tensors. GPU cases are skipped with
// the reason when there is no device; a build without CUDA checks that
// asking for a CUDA tensor is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <vector>

#include "framework/cuda/allocator.h"
#include "framework/error.h"
#include "framework/tensor.h"
#include "tests/test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {
namespace {

using cuda::AllocatorStats;
using cuda::BlockCache;

// A fake device: host memory, counting calls, with a capacity limit and
// blocks that can be marked busy on another stream.
struct FakeDevice {
  size_t capacity = size_t(1) << 30;
  size_t used = 0;
  int mallocs = 0, frees = 0;
  std::set<void*> busy;
  std::vector<std::pair<void*, size_t>> live;

  BlockCache::Backend backend() {
    BlockCache::Backend b;
    b.malloc = [this](size_t bytes) -> void* {
      if (used + bytes > capacity) return nullptr;
      used += bytes;
      ++mallocs;
      void* p = std::malloc(bytes);
      live.emplace_back(p, bytes);
      return p;
    };
    b.free = [this](void* p) {
      for (auto it = live.begin(); it != live.end(); ++it) {
        if (it->first == p) {
          used -= it->second;
          live.erase(it);
          break;
        }
      }
      ++frees;
      std::free(p);
    };
    b.retire = [this](void* p, const std::vector<int>&) { busy.insert(p); };
    b.pending = [this](void* p) { return busy.count(p) > 0; };
    return b;
  }
  ~FakeDevice() {
    for (auto& [p, n] : live) std::free(p);
  }
};

void throw_oom(size_t bytes, const AllocatorStats& st) {
  throw std::runtime_error("oom " + std::to_string(bytes) + ": " + st.str());
}

TEST(CachingAllocatorTest, SizeClassesRoundUp) {
  EXPECT_EQ(cuda::round_allocation(0), 0u);
  EXPECT_EQ(cuda::round_allocation(1), 512u);
  EXPECT_EQ(cuda::round_allocation(512), 512u);
  EXPECT_EQ(cuda::round_allocation(513), 1024u);
  EXPECT_EQ(cuda::round_allocation((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(cuda::round_allocation((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(cuda::round_allocation(5u << 20), 6u << 20);
}

TEST(CachingAllocatorTest, FreedBlockIsReusedWithoutANewDeviceAllocation) {
  FakeDevice dev;
  BlockCache cache(dev.backend());
  void* a = cache.allocate(1000, throw_oom);
  cache.free(a);
  // A training loop: the same sizes every iteration, one device allocation each.
  for (int it = 0; it < 5; ++it) {
    void* b = cache.allocate(1000, throw_oom);
    void* c = cache.allocate(3u << 20, throw_oom);
    EXPECT_EQ(b, a);
    cache.free(c);
    cache.free(b);
  }
  const AllocatorStats st = cache.stats();
  EXPECT_EQ(st.device_mallocs, 2);
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(st.cache_hits, 9);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.reserved_bytes, 1024u + (4u << 20));
  EXPECT_EQ(st.peak_allocated_bytes, 1024u + (4u << 20));
}

TEST(CachingAllocatorTest, StatsTrackAllocatedReservedAndPeak) {
  FakeDevice dev;
  BlockCache cache(dev.backend());
  void* a = cache.allocate(600, throw_oom);      // 1024
  void* b = cache.allocate(2u << 20, throw_oom);  // 2 MiB
  EXPECT_EQ(cache.block_size(a), 1024u);
  EXPECT_EQ(cache.stats().allocated_bytes, 1024u + (2u << 20));
  cache.free(b);
  AllocatorStats st = cache.stats();
  EXPECT_EQ(st.allocated_bytes, 1024u);
  EXPECT_EQ(st.reserved_bytes, 1024u + (2u << 20));
  EXPECT_EQ(st.peak_allocated_bytes, 1024u + (2u << 20));
  cache.reset_peak();
  EXPECT_EQ(cache.stats().peak_allocated_bytes, 1024u);
  EXPECT_CONTAINS(st.str(), "peak");
  // The line a CUDA run ends with: the peak before reset_peak(), in MiB.
  EXPECT_EQ(st.peak_line(), "peak GPU memory: 2.0 MiB (allocated in tensors; 2.0 MiB reserved from the device)");
  cache.empty_cache();  // the free 2 MiB block goes back
  st = cache.stats();
  EXPECT_EQ(st.reserved_bytes, 1024u);
  EXPECT_EQ(dev.frees, 1);
  cache.free(a);
}

TEST(CachingAllocatorTest, SmallClassesMatchExactlyLargeOnesWithinAnEighth) {
  FakeDevice dev;
  BlockCache cache(dev.backend());
  void* small = cache.allocate(2048, throw_oom);
  cache.free(small);
  void* other = cache.allocate(1024, throw_oom);  // another class: no reuse of the 2 KiB block
  EXPECT_NE(other, small);
  void* big = cache.allocate(18u << 20, throw_oom);
  cache.free(big);
  void* near = cache.allocate(16u << 20, throw_oom);  // 18 <= 16 + 2: reused
  EXPECT_EQ(near, big);
  cache.free(near);
  void* far = cache.allocate(8u << 20, throw_oom);  // 18 > 8 + 1: not reused
  EXPECT_NE(far, big);
  cache.free(far);
  cache.free(other);
}

TEST(CachingAllocatorTest, BlockUsedOnAnotherStreamWaitsForItsEvents) {
  FakeDevice dev;
  BlockCache cache(dev.backend());
  void* a = cache.allocate(4096, throw_oom);
  cache.record_use(a, 1);  // e.g. a prefetch on the copy stream
  cache.free(a);           // retire(): events recorded, block pending
  void* b = cache.allocate(4096, throw_oom);
  EXPECT_NE(b, a) << "a block still in use on another stream was handed out";
  dev.busy.clear();  // the events completed
  void* c = cache.allocate(4096, throw_oom);
  EXPECT_EQ(c, a);
  cache.free(b);
  cache.free(c);
}

TEST(CachingAllocatorTest, OutOfMemoryEmptiesTheCacheRetriesThenReports) {
  FakeDevice dev;
  dev.capacity = 8u << 20;
  BlockCache cache(dev.backend());
  void* a = cache.allocate(6u << 20, throw_oom);
  cache.free(a);  // cached, but a different class from what follows
  void* b = cache.allocate(2u << 20, throw_oom);  // fits beside it
  cache.free(b);
  void* c = cache.allocate(7u << 20, throw_oom);  // only after the cached blocks are returned
  EXPECT_NE(c, nullptr);
  EXPECT_GE(dev.frees, 1);
  const std::string msg = test::error_of<std::runtime_error>([&] { cache.allocate(4u << 20, throw_oom); });
  EXPECT_CONTAINS(msg, "oom 4194304");
  EXPECT_CONTAINS(msg, "reserved");
  cache.free(c);
}

// A captured step graph keeps its addresses: while its pool is open, what
// it allocates, and what is freed meanwhile, serves that pool alone until
// the pool is released.
TEST(CachingAllocatorTest, APrivatePoolKeepsItsBlocksUntilReleased) {
  FakeDevice dev;
  BlockCache cache(dev.backend());
  void* before = cache.allocate(1000, throw_oom);  // a tensor from before the capture
  void* cached = cache.allocate(4000, throw_oom);
  cache.free(cached);
  const int pool = cache.open_pool();
  EXPECT_GT(pool, 0);
  void* inside = cache.allocate(4000, throw_oom);  // served from the cache, now the pool's
  EXPECT_EQ(inside, cached);
  cache.free(inside);
  cache.free(before);  // freed during the capture: captured work may still read it
  void* again = cache.allocate(4000, throw_oom);  // the pool's own free block, reused inside it
  EXPECT_EQ(again, inside);
  void* kept = cache.allocate(3u << 20, throw_oom);  // new from the device, live after the capture
  cache.close_pool();
  EXPECT_EQ(cache.pool_blocks(pool), 3u);  // again, before, kept
  cache.free(again);
  // Outside the capture no pool block serves anyone: the same sizes come new from the device.
  const int mallocs = dev.mallocs;
  void* a = cache.allocate(4000, throw_oom);
  void* b = cache.allocate(1000, throw_oom);
  EXPECT_NE(a, again);
  EXPECT_NE(b, before);
  EXPECT_EQ(dev.mallocs, mallocs + 2);
  cache.free(a);
  cache.free(b);
  // Released (the graph is gone): its free blocks serve everyone again, and a live one once freed.
  cache.release_pool(pool);
  EXPECT_EQ(cache.pool_blocks(pool), 0u);
  void* c = cache.allocate(1000, throw_oom);
  void* d = cache.allocate(1000, throw_oom);
  EXPECT_TRUE((c == before || d == before) && c != d);
  cache.free(kept);
  EXPECT_EQ(cache.allocate(3u << 20, throw_oom), kept);
  EXPECT_EQ(dev.mallocs, mallocs + 2);
  cache.free(c);
  cache.free(d);
  cache.empty_cache();
  EXPECT_EQ(cache.stats().reserved_bytes, 4u << 20);  // only `kept`, still live
}

TEST(CopyElementsTest, CopiesARangeBetweenHostTensorsAndChecksBounds) {
  Tensor src({6});
  for (int i = 0; i < 6; ++i) src.data<float>()[i] = static_cast<float>(i + 1);
  Tensor dst({2, 4});
  copy_elements(dst, 5, src, 2, 3);
  EXPECT_EQ(test::values(dst), (std::vector<float>{0, 0, 0, 0, 0, 3, 4, 5}));
  copy_elements(dst, 0, src, 6, 0);  // empty range at the end: nothing
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { copy_elements(dst, 6, src, 0, 3); }), "out of bounds");
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { copy_elements(dst, 0, src, 4, 3); }), "out of bounds");
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { copy_elements(dst, -1, src, 0, 1); }), "out of bounds");
  Tensor ints({8}, DType::kI32);
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { copy_elements(ints, 0, src, 0, 1); }), "i32");
}

#ifndef STRATA_WITH_CUDA

TEST(CudaRuntimeTest, CpuOnlyBuildRejectsCudaTensorsClearly) {
  const std::string msg = test::error_of<ConfigError>([] { Tensor t({4}, DType::kF32, Device::cuda(0)); });
  EXPECT_CONTAINS(msg, "no CUDA backend");
  EXPECT_CONTAINS(msg, "--device cpu");
}

#else


TEST(CudaRuntimeTest, CopiesRoundTripThroughTheDevice) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  Tensor host({3, 5});
  float* h = host.data<float>();
  for (int i = 0; i < 15; ++i) h[i] = 0.5f * static_cast<float>(i) - 3.0f;
  Tensor dev = host.to(Device::cuda(0));
  EXPECT_EQ(dev.device(), Device::cuda(0));
  EXPECT_EQ(dev.shape(), host.shape());
  Tensor dev2 = dev.clone();  // device to device
  Tensor back({15});
  back.copy_from(dev2);
  EXPECT_EQ(test::values(back), test::values(host));
  EXPECT_EQ(host.to(Device::cpu()).raw_data(), host.raw_data()) << "to() its own device is the tensor itself";
}

TEST(CudaRuntimeTest, CopyElementsMovesRangesToFromAndBetweenDevices) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  Tensor host({8});
  for (int i = 0; i < 8; ++i) host.data<float>()[i] = static_cast<float>(10 + i);
  Tensor dev({8}, DType::kF32, Device::cuda(0));
  copy_elements(dev, 4, host, 0, 4);        // host -> device
  Tensor dev2({8}, DType::kF32, Device::cuda(0));
  copy_elements(dev2, 0, dev, 2, 6);        // device -> device
  Tensor back({8});
  copy_elements(back, 1, dev2, 0, 7);       // device -> host
  EXPECT_EQ(test::values(back), (std::vector<float>{0, 0, 0, 10, 11, 12, 13, 0}));
}

TEST(CudaRuntimeTest, NewStorageIsZeroAndFillZeroWorkOnTheDevice) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  Tensor dev({1000}, DType::kF32, Device::cuda(0));
  EXPECT_EQ(test::values(dev.to(Device::cpu())), std::vector<float>(1000, 0.0f));
  dev.fill(2.5f);
  EXPECT_EQ(test::values(dev.to(Device::cpu())), std::vector<float>(1000, 2.5f));
  dev.zero();
  EXPECT_EQ(test::values(dev.to(Device::cpu())), std::vector<float>(1000, 0.0f));
  dev.resize({3000});  // grows: new zeroed storage
  EXPECT_EQ(test::values(dev.to(Device::cpu())), std::vector<float>(3000, 0.0f));
}

TEST(CudaRuntimeTest, HostAccessorRefusesDeviceMemoryThatTheDeviceAccessorServes) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  Tensor dev({4}, DType::kF32, Device::cuda(0));
  EXPECT_CONTAINS(test::error_of<Error>([&] { dev.data<float>(); }), "copy it to the host with .to(Device::cpu())");
  EXPECT_NE(dev.device_data<float>(), nullptr);
  EXPECT_EQ(dev.device_data<float>(), dev.raw_data());
}

TEST(CudaRuntimeTest, TensorsReuseCachedDeviceMemory) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  { Tensor warm({1 << 20}, DType::kF32, Device::cuda(0)); }
  const AllocatorStats before = cuda::memory_stats(0);
  for (int it = 0; it < 10; ++it) {
    Tensor t({1 << 20}, DType::kF32, Device::cuda(0));
    t.fill(1.0f);
  }
  const AllocatorStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs) << "cudaMalloc in a steady-state loop";
  EXPECT_GE(after.cache_hits, before.cache_hits + 10);
  EXPECT_GE(after.peak_allocated_bytes, size_t(4) << 20);
  EXPECT_CONTAINS(cuda::memory_report(0), "reserved");
}

// cast_into on the device (framework/cuda/cast.cu) gives the host's bits:
// f32 to bf16 and f16 to the nearest even, back to f32, and between the two
// halves; NaN stays NaN. fill_bytes(0xff) is NaN in each.
TEST(CudaRuntimeTest, CastIntoOnTheDeviceGivesTheHostsBits) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 65520.0f, 1e6f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-10f,
                          1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f,
                          3e38f, -3e38f, 1.0f / 0.0f};
  for (int i = 0; i < 5000; ++i) v.push_back(std::ldexp(static_cast<float>(i % 97) - 48.5f, i % 40 - 20));
  Tensor host({static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) host.data<float>()[i] = v[i];
  const Tensor dev = host.to(Device::cuda(0));
  auto bits16 = [](const Tensor& t) {
    const Tensor h = t.to(Device::cpu());
    return std::vector<uint16_t>(h.data<uint16_t>(), h.data<uint16_t>() + h.numel());
  };
  for (DType to : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(to));
    Tensor want(host.shape(), to), got(host.shape(), to, Device::cuda(0));
    cast_into(want, host);
    cast_into(got, dev);
    EXPECT_EQ(bits16(got), bits16(want));
    Tensor back_want(host.shape()), back_got(host.shape(), DType::kF32, Device::cuda(0));
    cast_into(back_want, want);
    cast_into(back_got, got);
    EXPECT_EQ(test::values(back_got.to(Device::cpu())), test::values(back_want));
    const DType other = to == DType::kBF16 ? DType::kF16 : DType::kBF16;
    Tensor cross_want(host.shape(), other), cross_got(host.shape(), other, Device::cuda(0));
    cast_into(cross_want, want);
    cast_into(cross_got, got);
    EXPECT_EQ(bits16(cross_got), bits16(cross_want));
    got.fill_bytes(0xff);
    Tensor wide(host.shape(), DType::kF32, Device::cuda(0));
    cast_into(wide, got);
    for (float x : test::values(wide.to(Device::cpu()))) ASSERT_TRUE(std::isnan(x));
  }
  Tensor nan_in({2}, DType::kF32);
  nan_in.data<float>()[0] = std::nanf("");
  nan_in.data<float>()[1] = -std::nanf("");
  Tensor nan_out({2}, DType::kBF16, Device::cuda(0)), nan_back({2});
  cast_into(nan_out, nan_in.to(Device::cuda(0)));
  cast_into(nan_back, nan_out.to(Device::cpu()));
  EXPECT_TRUE(std::isnan(nan_back.data<float>()[0]) && std::isnan(nan_back.data<float>()[1]));
}

TEST(CudaRuntimeTest, UnknownDeviceIsAConfigErrorNamingTheDevices) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA path is compile-tested only");
  const std::string msg = test::error_of<ConfigError>([] { Tensor t({4}, DType::kF32, Device::cuda(99)); });
  EXPECT_CONTAINS(msg, "cuda:99 does not exist");
}

#endif  // STRATA_WITH_CUDA

}  // namespace
}  // namespace strata
