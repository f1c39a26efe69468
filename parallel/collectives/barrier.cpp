// Dissemination barrier: in round k rank r sends a one-byte token to
// r + 2^k and waits for one from r - 2^k. After ceil(log2(n)) rounds every
// rank has (transitively) heard from every other, so none leaves before all
// have entered. (A token byte, because a zero-byte message does not exist on
// a byte stream.)
#include "framework/error.h"
#include "parallel/collectives/collectives.h"

namespace strata::parallel {

void barrier_dissemination(Transport& t) {
  const int n = t.world_size();
  const int r = t.rank();
  for (int k = 1; k < n; k <<= 1) {
    const char token = 'B';
    char got = 0;
    const int from = (r - k + n) % n;
    t.send_recv((r + k) % n, &token, 1, from, &got, 1, nullptr);
    if (got != token) {
      fail<Error>("barrier: ", t.peer_name(from), " sent byte ", static_cast<int>(got),
                  " instead of the barrier token: the ranks are not running the same collectives in the same order");
    }
  }
}

}  // namespace strata::parallel
