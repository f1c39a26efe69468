// Binomial-tree broadcast. Relative rank v = (rank - root) mod n receives
// from v - lowbit(v) and sends to v + m for each power of two m below
// lowbit(v) (the root: below n), largest subtree first. Large messages go
// segment by segment, so inner ranks forward segment k while segment k + 1
// is arriving.
#include <algorithm>

#include "parallel/collectives/collectives.h"

namespace strata::parallel {

void broadcast_tree(Transport& t, void* data, size_t bytes, int root) {
  const int n = t.world_size();
  if (n == 1 || bytes == 0) return;
  const int vr = (t.rank() - root + n) % n;
  auto real = [&](int v) { return (v + root) % n; };
  int span = 1;  // lowbit(vr), or the smallest power of two >= n for the root
  while (span < n && !(vr & span)) span <<= 1;
  const int parent = vr == 0 ? -1 : real(vr - span);
  auto* base = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += kPipelineSegmentBytes) {
    const size_t len = std::min(kPipelineSegmentBytes, bytes - off);
    if (parent >= 0) t.recv(parent, base + off, len);
    for (int m = span >> 1; m > 0; m >>= 1) {
      if (vr + m < n) t.send(real(vr + m), base + off, len);
    }
  }
}

}  // namespace strata::parallel
