// Binomial-tree reduce to a root, plus the receive-and-reduce building block
// the other reducing collectives use.
#include <algorithm>
#include <cstring>

#include "parallel/collectives/collectives.h"
#include "parallel/collectives/reduce_kernels.h"

namespace strata::parallel {

void send_recv_reduce(Transport& t, int send_peer, const void* send_data, size_t send_bytes, int recv_peer, void* dst,
                      void* scratch, size_t count, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(scratch);
  const size_t segment = std::max<size_t>(1, kReduceSegmentBytes / es);
  size_t reduced = 0;  // elements already combined into dst
  auto reduce_upto = [&](size_t upto) {
    if (upto > reduced) reduce_into(d + reduced * es, s + reduced * es, upto - reduced, dtype, op);
    reduced = upto;
  };
  // Reduce whole segments as soon as they are complete (a stretch may end
  // mid-element; only whole elements are combined), while the transport
  // keeps receiving into the rest of the scratch buffer.
  t.send_recv(send_peer, send_data, send_bytes, recv_peer, scratch, count * es, [&](size_t, size_t end) {
    const size_t arrived = end / es;
    if (arrived - reduced >= segment || arrived == count) reduce_upto(arrived);
  });
  reduce_upto(count);
}

void reduce_tree(Transport& t, Workspace& ws, void* data, size_t count, DType dtype, ReduceOp op, int root,
                 NonRootBuffer non_root) {
  const int n = t.world_size();
  const int r = t.rank();
  const size_t es = dtype_size(dtype);
  if (n > 1 && count > 0) {
    const int vr = (r - root + n) % n;  // rank relative to the root
    auto real = [&](int v) { return (v + root) % n; };
    const size_t segment = std::max<size_t>(1, kPipelineSegmentBytes / es);
    const size_t seg_bytes = std::min(count, segment) * es;
    void* recv_buf = ws.get(0, seg_bytes);
    // Non-root ranks that have children accumulate in workspace memory when
    // their own buffer must stay unchanged.
    const bool has_children = vr == 0 ? true : (vr & 1) == 0 && vr + 1 < n;
    const bool use_acc = vr != 0 && has_children && non_root == NonRootBuffer::kUnchanged;
    char* acc_buf = use_acc ? static_cast<char*>(ws.get(1, seg_bytes)) : nullptr;
    auto* base = static_cast<char*>(data);
    // Segment by segment, so a parent forwards segment k up while its
    // children already send segment k + 1.
    for (size_t off = 0; off < count; off += segment) {
      const size_t len = std::min(segment, count - off);
      char* acc = base + off * es;
      if (use_acc) {
        std::memcpy(acc_buf, acc, len * es);
        acc = acc_buf;
      }
      for (int mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) {
          t.send(real(vr - mask), acc, len * es);
          break;
        }
        if (vr + mask < n) {
          const int child = real(vr + mask);
          send_recv_reduce(t, child, nullptr, 0, child, acc, recv_buf, len, dtype, op);
        }
      }
    }
  }
  if (r == root && op == ReduceOp::kAverage) scale_average(data, count, dtype, n);
}

}  // namespace strata::parallel
