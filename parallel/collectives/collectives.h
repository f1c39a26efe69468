// Collective algorithms written once over the Transport interface, so that
// every byte transport (TCP now, RDMA later) reuses them. They work on raw
// bytes plus an element count, a DType and a ReduceOp; tensors, argument
// checks and error context live in the communicator above.
//
// Every rank of the transport's world must call the same function with the
// same count, dtype, op and root, in the same order as its other calls.
// Errors (timeouts, closed connections) come from the transport and name the
// peer; after one, the byte streams are out of step and the transport must
// not be used again.
//
// Reductions combine with reduce_into (parallel/collectives/reduce_kernels.h); kAverage
// sums and then divides once, on the fully reduced data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/tensor.h"
#include "parallel/transport/transport.h"

namespace strata::parallel {

// Large messages are cut into segments of about this many bytes:
// - kReduceSegmentBytes: received data is reduced in stretches of this size
//   while the rest of the message is still arriving;
// - kPipelineSegmentBytes: tree algorithms (broadcast, reduce) forward one
//   segment down/up the tree while the next is in flight.
constexpr size_t kReduceSegmentBytes = 64 << 10;
constexpr size_t kPipelineSegmentBytes = 256 << 10;

// Scratch buffers an algorithm may use, kept by the caller between calls so
// that steady-state calls do not allocate. Two independent slots.
class Workspace {
 public:
  Workspace() = default;
  ~Workspace() {
    for (auto& b : bufs_) aligned_free(b.ptr);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // At least `bytes` of 64-byte aligned memory in slot 0 or 1; contents are
  // not preserved across calls that grow the slot.
  void* get(int slot, size_t bytes) {
    Buf& b = bufs_[slot];
    if (b.bytes < bytes) {
      aligned_free(b.ptr);
      b.ptr = nullptr;
      b.bytes = 0;
      b.ptr = aligned_alloc_bytes(bytes);
      b.bytes = bytes;
    }
    return b.ptr;
  }

 private:
  struct Buf {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Buf bufs_[2];
};

// Element range [chunk_begin(i), chunk_begin(i + 1)) of chunk i when `count`
// elements are split into `parts` nearly equal chunks (some may be empty).
inline size_t chunk_begin(size_t count, int parts, int i) {
  return static_cast<size_t>((static_cast<unsigned __int128>(count) * static_cast<unsigned>(i)) /
                             static_cast<unsigned>(parts));
}

// Building block: sends send_bytes to send_peer while receiving `count`
// elements from recv_peer into `scratch`, reducing them into `dst`
// (dst = op(dst, received)) stretch by stretch as they arrive.
void send_recv_reduce(Transport& t, int send_peer, const void* send_data, size_t send_bytes, int recv_peer, void* dst,
                      void* scratch, size_t count, DType dtype, ReduceOp op);

// --- allreduce: every rank ends with op over all ranks' data (in place). ---
// Ring: reduce-scatter then allgather around the ring; each rank sends and
// receives 2 (n-1)/n of the data, so bandwidth-optimal for large messages.
void allreduce_ring(Transport& t, Workspace& ws, void* data, size_t count, DType dtype, ReduceOp op);
// Binomial tree: reduce to rank 0, then broadcast; 2 log2(n) latencies
// instead of the ring's 2 (n-1), so better for small messages.
void allreduce_tree(Transport& t, Workspace& ws, void* data, size_t count, DType dtype, ReduceOp op);

// --- rooted collectives (binomial trees, segmented for large messages) ---
// Copies root's bytes to every rank.
void broadcast_tree(Transport& t, void* data, size_t bytes, int root);
// What non-root ranks' buffers hold after reduce_tree.
enum class NonRootBuffer {
  kUnchanged,  // partial results go to workspace memory (Communicator::reduce)
  kScratch,    // partial results may be left in the buffer (cheaper; allreduce)
};
// Root ends with op over all ranks' data.
void reduce_tree(Transport& t, Workspace& ws, void* data, size_t count, DType dtype, ReduceOp op, int root,
                 NonRootBuffer non_root = NonRootBuffer::kUnchanged);

// --- block collectives; `block_bytes` is one rank's share ---
// out (world_size blocks) gets rank r's `in` at block r, on every rank.
void allgather_ring(Transport& t, const void* in, void* out, size_t block_bytes);
// Like allgather, but only root's `out` is written (others may pass nullptr).
void gather_linear(Transport& t, const void* in, void* out, size_t block_bytes, int root);
// Rank r gets block r of root's `in` (others' `in` is ignored, may be nullptr).
void scatter_linear(Transport& t, const void* in, void* out, size_t block_bytes, int root);
// `in` holds world_size blocks of `count` elements; rank r gets op over all
// ranks' block r in `out`. Ring algorithm; `in` is not modified.
void reduce_scatter_ring(Transport& t, Workspace& ws, const void* in, void* out, size_t count, DType dtype,
                         ReduceOp op);

// Returns once every rank has entered: dissemination with one-byte tokens,
// ceil(log2(n)) rounds.
void barrier_dissemination(Transport& t);

}  // namespace strata::parallel
