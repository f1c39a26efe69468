// Ring allreduce: reduce-scatter, then allgather, around rank -> rank + 1.
// The data is split into world_size chunks; in reduce-scatter step s each
// rank sends chunk (r - s) to the next rank while receiving chunk (r - s - 1)
// from the previous one and reducing it segment by segment as it arrives, so
// sending, receiving and reducing overlap. After n - 1 steps rank r holds the
// fully reduced chunk r + 1, which the allgather steps pass around.
#include <algorithm>

#include "parallel/collectives/collectives.h"
#include "parallel/collectives/reduce_kernels.h"

namespace strata::parallel {

void allreduce_ring(Transport& t, Workspace& ws, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = t.world_size();
  const int r = t.rank();
  if (n == 1 || count == 0) return;  // the average of one value is itself
  const size_t es = dtype_size(dtype);
  auto* base = static_cast<char*>(data);
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  auto begin = [&](int c) { return chunk_begin(count, n, c); };
  auto len = [&](int c) { return begin(c + 1) - begin(c); };
  const int next = mod(r + 1);
  const int prev = mod(r - 1);
  void* scratch = ws.get(0, std::max<size_t>(1, len(0) + 1) * es);  // chunks differ by at most one element

  for (int s = 0; s < n - 1; ++s) {
    const int send_c = mod(r - s);
    const int recv_c = mod(r - s - 1);
    send_recv_reduce(t, next, base + begin(send_c) * es, len(send_c) * es, prev, base + begin(recv_c) * es, scratch,
                     len(recv_c), dtype, op);
  }
  const int own = mod(r + 1);
  if (op == ReduceOp::kAverage) scale_average(base + begin(own) * es, len(own), dtype, n);
  for (int s = 0; s < n - 1; ++s) {
    const int send_c = mod(r + 1 - s);
    const int recv_c = mod(r - s);
    t.send_recv(next, base + begin(send_c) * es, len(send_c) * es, prev, base + begin(recv_c) * es, len(recv_c) * es,
                nullptr);
  }
}

}  // namespace strata::parallel
