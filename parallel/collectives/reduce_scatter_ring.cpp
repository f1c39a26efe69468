// Ring reduce-scatter. In step s rank r sends its partial result for block
// (r - s - 1) to rank r + 1 and receives rank r - 1's partial result for
// block (r - s - 2), combining its own input into it as it arrives. Step 0
// sends the input block itself; the last step receives block r, which is then
// complete, straight into the output. `in` is never written.
#include <algorithm>
#include <cstring>

#include "parallel/collectives/collectives.h"
#include "parallel/collectives/reduce_kernels.h"

namespace strata::parallel {

void reduce_scatter_ring(Transport& t, Workspace& ws, const void* in, void* out, size_t count, DType dtype,
                         ReduceOp op) {
  const int n = t.world_size();
  const int r = t.rank();
  const size_t es = dtype_size(dtype);
  const size_t bytes = count * es;
  const auto* src = static_cast<const char*>(in);
  if (n == 1 || count == 0) {
    if (bytes > 0 && src != out) std::memmove(out, src, bytes);
    return;
  }
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  const int next = mod(r + 1);
  const int prev = mod(r - 1);
  char* bufs[2] = {static_cast<char*>(ws.get(0, bytes)), static_cast<char*>(ws.get(1, bytes))};
  const char* sending = src + static_cast<size_t>(mod(r - 1)) * bytes;
  for (int s = 0; s < n - 1; ++s) {
    const size_t block = static_cast<size_t>(mod(r - s - 2));
    char* receiving = s == n - 2 ? static_cast<char*>(out) : bufs[s % 2];
    // dst = op(received partial, our block), combined stretch by stretch
    // while the rest of the partial is still arriving.
    const char* ours = src + block * bytes;
    const size_t segment = std::max<size_t>(1, kReduceSegmentBytes / es);
    size_t reduced = 0;
    auto reduce_upto = [&](size_t upto) {
      if (upto > reduced) reduce_into(receiving + reduced * es, ours + reduced * es, upto - reduced, dtype, op);
      reduced = upto;
    };
    t.send_recv(next, sending, bytes, prev, receiving, bytes, [&](size_t, size_t end) {
      const size_t arrived = end / es;
      if (arrived - reduced >= segment || arrived == count) reduce_upto(arrived);
    });
    reduce_upto(count);
    sending = receiving;
  }
  if (op == ReduceOp::kAverage) scale_average(out, count, dtype, n);
}

}  // namespace strata::parallel
