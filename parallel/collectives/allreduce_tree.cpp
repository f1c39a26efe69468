// Tree allreduce: binomial-tree reduce to rank 0, then binomial-tree
// broadcast back. 2 log2(n) message latencies (the ring needs 2 (n - 1)), but
// rank 0's links carry the whole message log2(n) times: the choice for small
// messages.
#include "parallel/collectives/collectives.h"

namespace strata::parallel {

void allreduce_tree(Transport& t, Workspace& ws, void* data, size_t count, DType dtype, ReduceOp op) {
  if (t.world_size() == 1 || count == 0) return;
  // Non-root buffers are overwritten by the broadcast, so partial sums may
  // live in them.
  reduce_tree(t, ws, data, count, dtype, op, 0, NonRootBuffer::kScratch);
  broadcast_tree(t, data, count * dtype_size(dtype), 0);
}

}  // namespace strata::parallel
