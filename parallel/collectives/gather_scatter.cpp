// Linear gather and scatter: the root talks to every other rank in turn.
// The root's link carries (n - 1) blocks either way, so a tree would save
// latency but not bandwidth; these collectives are not on a hot path.
#include <cstring>

#include "parallel/collectives/collectives.h"

namespace strata::parallel {

void gather_linear(Transport& t, const void* in, void* out, size_t block_bytes, int root) {
  const int n = t.world_size();
  const int r = t.rank();
  if (r != root) {
    t.send(root, in, block_bytes);
    return;
  }
  auto* base = static_cast<char*>(out);
  if (block_bytes > 0 && base + r * block_bytes != in) std::memmove(base + r * block_bytes, in, block_bytes);
  for (int i = 0; i < n; ++i) {
    if (i != root) t.recv(i, base + i * block_bytes, block_bytes);
  }
}

void scatter_linear(Transport& t, const void* in, void* out, size_t block_bytes, int root) {
  const int n = t.world_size();
  const int r = t.rank();
  if (r != root) {
    t.recv(root, out, block_bytes);
    return;
  }
  const auto* base = static_cast<const char*>(in);
  for (int i = 0; i < n; ++i) {
    if (i != root) t.send(i, base + i * block_bytes, block_bytes);
  }
  if (block_bytes > 0 && base + r * block_bytes != out) std::memmove(out, base + r * block_bytes, block_bytes);
}

}  // namespace strata::parallel
