#include "framework/cuda/allocator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "framework/byte_size.h"

namespace strata::cuda {

namespace {

constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;

}  // namespace

std::string AllocatorStats::str() const {
  std::ostringstream os;
  os << "allocated " << format_bytes(allocated_bytes) << " (peak " << format_bytes(peak_allocated_bytes)
     << "), reserved " << format_bytes(reserved_bytes) << " (peak " << format_bytes(peak_reserved_bytes) << "), "
     << device_mallocs << " device allocations, " << cache_hits << " cache hits";
  return os.str();
}

std::string AllocatorStats::peak_line() const {
  constexpr double kMiB = 1024.0 * 1024.0;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "peak GPU memory: %.1f MiB (allocated in tensors; %.1f MiB reserved from the device)",
                static_cast<double>(peak_allocated_bytes) / kMiB, static_cast<double>(peak_reserved_bytes) / kMiB);
  return buf;
}

size_t round_allocation(size_t bytes) {
  if (bytes == 0) return 0;
  const size_t r = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

void* BlockCache::take_cached(FreeList& list, size_t size) {
  // Small classes reuse exact matches only; a large request may take a block
  // up to 1/8 bigger than itself.
  const size_t limit = size < kSmallLimit ? size : size + size / 8;
  for (auto it = list.lower_bound(size); it != list.end() && it->first <= limit; ++it) {
    void* p = it->second;
    if (backend_.pending && backend_.pending(p)) continue;  // still in use on another stream
    const size_t got = it->first;
    list.erase(it);
    live_[p] = Block{got, {}, open_pool_};
    return p;
  }
  return nullptr;
}

void BlockCache::release_free_blocks() {
  for (auto it = free_.begin(); it != free_.end();) {
    if (backend_.pending && backend_.pending(it->second)) {
      ++it;
      continue;
    }
    backend_.free(it->second);
    stats_.reserved_bytes -= it->first;
    ++stats_.device_frees;
    it = free_.erase(it);
  }
}

void* BlockCache::allocate(size_t bytes, const std::function<void(size_t, const AllocatorStats&)>& on_oom) {
  if (bytes == 0) return nullptr;
  const size_t size = round_allocation(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = open_pool_ ? take_cached(pool_free_[open_pool_], size) : nullptr;
  if (!p) p = take_cached(free_, size);
  if (p) {
    ++stats_.cache_hits;
  } else {
    p = backend_.malloc(size);
    if (!p) {
      // Out of memory: give the cached blocks back and try once more.
      release_free_blocks();
      p = backend_.malloc(size);
    }
    if (!p) {
      on_oom(bytes, stats_);
      return nullptr;  // on_oom is expected to throw
    }
    ++stats_.device_mallocs;
    stats_.reserved_bytes += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    live_[p] = Block{size, {}, open_pool_};
  }
  stats_.allocated_bytes += live_[p].size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return p;
}

void BlockCache::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: nothing to do (never happens for Storage)
  if (!it->second.other_streams.empty() && backend_.retire) backend_.retire(ptr, it->second.other_streams);
  stats_.allocated_bytes -= it->second.size;
  // Freed while a pool is open: captured work may still use it, so it joins the pool.
  const int pool = it->second.pool ? it->second.pool : open_pool_;
  (pool ? pool_free_[pool] : free_).emplace(it->second.size, ptr);
  live_.erase(it);
}

int BlockCache::open_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  open_pool_ = ++last_pool_;
  pool_free_[open_pool_];
  return open_pool_;
}

void BlockCache::close_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  open_pool_ = 0;
}

void BlockCache::release_pool(int pool) {
  if (pool <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (open_pool_ == pool) open_pool_ = 0;
  auto it = pool_free_.find(pool);
  if (it != pool_free_.end()) {
    free_.insert(it->second.begin(), it->second.end());
    pool_free_.erase(it);
  }
  for (auto& [p, b] : live_) {
    if (b.pool == pool) b.pool = 0;
  }
}

size_t BlockCache::pool_blocks(int pool) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  if (auto it = pool_free_.find(pool); it != pool_free_.end()) n += it->second.size();
  for (const auto& [p, b] : live_) n += b.pool == pool ? 1 : 0;
  return n;
}

void BlockCache::record_use(void* ptr, int stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  std::vector<int>& s = it->second.other_streams;
  if (std::find(s.begin(), s.end(), stream) == s.end()) s.push_back(stream);
}

void BlockCache::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_blocks();
}

AllocatorStats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BlockCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

size_t BlockCache::block_size(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second.size;
}

}  // namespace strata::cuda
