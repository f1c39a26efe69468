// Caching allocator: the block cache behind every CUDA tensor. Freed blocks
// go to size-class free lists and are handed out again, so a training loop
// whose shapes repeat calls cudaMalloc only in its first iteration.
//
// Size classes: requests round up to 512 bytes below 1 MiB and to 2 MiB
// above; a free block is reused for a request of its own class, or of a
// class up to 1/8 smaller for large blocks (never split, so the cache stays
// simple and cannot fragment a block).
//
// Stream-ordered reuse: memory is used on the device's compute stream by
// default, so a block freed on the host can be reused at once by later work
// queued on that stream. A block also used on another stream (a prefetch on
// the copy stream, an allreduce on the comm stream) is marked with
// record_use(); when it is freed an event is recorded on each such stream
// and the block is not reused until those events have completed.
//
// Private pools (step graphs, framework/solver/step_graph.h): a captured
// CUDA graph keeps the addresses it was captured with, so the blocks its work
// used must not serve anyone else while it lives. While a pool is open, every
// allocation is tagged with it, and so is every block freed meanwhile (work
// already captured may still use it); a tagged block, once free, serves only
// its own pool, until release_pool() hands the pool's blocks back.
//
// The cache logic (BlockCache) is plain C++ over a Backend, so it is unit
// tested without a GPU; the CUDA backend lives in allocator.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata::cuda {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in live tensors (rounded sizes)
  size_t reserved_bytes = 0;        // obtained from the device (allocated + cached)
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  int64_t device_mallocs = 0;       // calls to the backend's malloc
  int64_t device_frees = 0;         // calls to the backend's free (empty_cache, retries)
  int64_t cache_hits = 0;           // allocations served from the cache
  std::string str() const;          // "allocated 1.2 MiB (peak ...), reserved ..."
  // "peak GPU memory: 10240.0 MiB (allocated in tensors; 12288.0 MiB reserved
  // from the device)": the line `strata train` and `strata embed` end a CUDA
  // run with. Always MiB with one decimal, so tools/bench/run_gpu_bench.py
  // reads it with one pattern and compares it with
  // torch.cuda.max_memory_allocated.
  std::string peak_line() const;
};

// Size class of a request in bytes (>= bytes, 0 for 0).
size_t round_allocation(size_t bytes);

class BlockCache {
 public:
  // What the cache needs from a device. `malloc` returns nullptr when out of
  // memory; `pending` (optional) is true while work on other streams may
  // still use a freed block (it polls the events recorded by `retire`);
  // `retire` (optional) records those events when a block is freed.
  struct Backend {
    std::function<void*(size_t)> malloc;
    std::function<void(void*)> free;
    std::function<void(void* block, const std::vector<int>& streams)> retire;
    std::function<bool(void* block)> pending;
  };

  explicit BlockCache(Backend backend) : backend_(std::move(backend)) {}
  ~BlockCache() = default;  // the device context owns the memory and may already be gone
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Never returns nullptr for bytes > 0: when the device is out of memory,
  // the cache is emptied and the request retried; then `on_oom` is called
  // with the request and the stats (it should throw).
  void* allocate(size_t bytes, const std::function<void(size_t, const AllocatorStats&)>& on_oom);
  void free(void* ptr);
  // `ptr` (from allocate) is also used on `stream` (an id the backend knows).
  void record_use(void* ptr, int stream);
  // Returns every cached (free, not pending) block to the device.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();
  size_t block_size(void* ptr) const;  // rounded size of a live block; 0 if unknown

  // Private pools (above). open_pool() returns the new pool's id (> 0);
  // one pool is open at a time.
  int open_pool();
  void close_pool();
  // The pool's free blocks go back to the cache; its live blocks return there
  // when freed. Call when nothing captured with the pool can run any more.
  void release_pool(int pool);
  size_t pool_blocks(int pool) const;  // blocks tagged with `pool`, live or free

 private:
  using FreeList = std::multimap<size_t, void*>;  // size -> block
  struct Block {
    size_t size = 0;
    std::vector<int> other_streams;
    int pool = 0;
  };
  void* take_cached(FreeList& list, size_t size);
  void release_free_blocks();

  Backend backend_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  FreeList free_;
  std::map<int, FreeList> pool_free_;  // a pool's free blocks
  int open_pool_ = 0;
  int last_pool_ = 0;
  AllocatorStats stats_;
};

}  // namespace strata::cuda
