// Placing buffers with known lifetimes in one arena: each buffer gets an
// offset such that two buffers alive at the same step never overlap, so the
// arena needs about the peak of what is alive at once instead of the sum of
// everything (the offset planners of MXNet and TensorFlow's static memory
// planning). The steps are whatever the caller counts: the Net's are
// forward 0..L-1, then backward L..2L-1.
#pragma once

#include <cstddef>
#include <vector>

namespace strata {

// A buffer of `bytes`, written first at step `first` and read last at step
// `last` (first <= last): alive over [first, last].
struct Lifetime {
  size_t bytes = 0;
  int first = 0;
  int last = 0;
  // Placed after every buffer of a lower group (0 by default: one group).
  // A short-lived block (a call's scratch) placed last fills the holes the
  // others leave at its step; placed first by size, a large one pushes
  // every long-lived buffer alive at its step above it.
  int group = 0;
};

struct Placement {
  std::vector<size_t> offsets;  // per buffer, a multiple of the alignment
  size_t arena_bytes = 0;       // end of the highest buffer
  size_t peak_bytes = 0;        // the most bytes alive at one step (a lower bound of arena_bytes)
};

// Greedy: group by group, the largest buffers first (ties: the earlier
// first step), each at the lowest aligned offset where it overlaps no placed
// buffer whose lifetime meets its own. Deterministic. `alignment` is a power
// of two.
Placement place_lifetimes(const std::vector<Lifetime>& buffers, size_t alignment);

}  // namespace strata
