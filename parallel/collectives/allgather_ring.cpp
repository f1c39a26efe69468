// Ring allgather: in step s rank r passes block (r - s) to rank r + 1 and
// receives block (r - s - 1) from rank r - 1, straight into the output.
#include <cstring>

#include "parallel/collectives/collectives.h"

namespace strata::parallel {

void allgather_ring(Transport& t, const void* in, void* out, size_t block_bytes) {
  const int n = t.world_size();
  const int r = t.rank();
  auto* base = static_cast<char*>(out);
  if (block_bytes > 0 && base + r * block_bytes != in) std::memmove(base + r * block_bytes, in, block_bytes);
  if (n == 1 || block_bytes == 0) return;
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_b = static_cast<size_t>(mod(r - s));
    const size_t recv_b = static_cast<size_t>(mod(r - s - 1));
    t.send_recv(mod(r + 1), base + send_b * block_bytes, block_bytes, mod(r - 1), base + recv_b * block_bytes,
                block_bytes, nullptr);
  }
}

}  // namespace strata::parallel
