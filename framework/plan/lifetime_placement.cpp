#include "framework/plan/lifetime_placement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "framework/error.h"

namespace strata {
namespace {

size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

bool meet(const Lifetime& a, const Lifetime& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

Placement place_lifetimes(const std::vector<Lifetime>& buffers, size_t alignment) {
  STRATA_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment ", alignment,
               " is not a power of two");
  for (const Lifetime& b : buffers) {
    STRATA_CHECK(b.first <= b.last, "a lifetime [", b.first, ", ", b.last, "] that ends before it starts");
  }
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].group != buffers[b].group) return buffers[a].group < buffers[b].group;
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  Placement p;
  p.offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const Lifetime& b = buffers[i];
    const size_t size = align_up(b.bytes, alignment);
    // The address ranges of placed buffers alive at the same time, by start.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      if (meet(b, buffers[j])) busy.emplace_back(p.offsets[j], p.offsets[j] + align_up(buffers[j].bytes, alignment));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& r : busy) {
      if (offset + size <= r.first) break;  // fits in the gap before r
      offset = std::max(offset, r.second);
    }
    p.offsets[i] = offset;
    p.arena_bytes = std::max(p.arena_bytes, offset + size);
    placed.push_back(i);
  }
  // The peak of what is alive at once, for the report and the tests.
  std::map<int, long long> delta;
  for (const Lifetime& b : buffers) {
    delta[b.first] += static_cast<long long>(align_up(b.bytes, alignment));
    delta[b.last + 1] -= static_cast<long long>(align_up(b.bytes, alignment));
  }
  long long alive = 0;
  for (const auto& kv : delta) {
    alive += kv.second;
    p.peak_bytes = std::max(p.peak_bytes, static_cast<size_t>(alive));
  }
  return p;
}

}  // namespace strata
