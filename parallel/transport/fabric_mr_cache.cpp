#ifdef STRATA_HAVE_LIBFABRIC
#include "parallel/transport/fabric_mr_cache.h"
#include "parallel/transport/fabric_provider.h"

#include <unistd.h>

#include <cerrno>

#include "framework/error.h"
#include "parallel/socket/socket.h"

namespace strata::parallel {

namespace {

uintptr_t page_size() {
  static const uintptr_t p = [] {
    const long v = ::sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<uintptr_t>(v) : uintptr_t{4096};
  }();
  return p;
}

}  // namespace

FabricMrCache::FabricMrCache(fid_domain* domain, bool required, std::string self)
    : domain_(domain), required_(required), self_(std::move(self)) {}

FabricMrCache::~FabricMrCache() { clear(); }

void FabricMrCache::clear() {
  for (auto& [start, range] : ranges_) {
    if (range.mr) fi_close(&range.mr->fid);
  }
  ranges_.clear();
  for (fid_mr* mr : retired_) fi_close(&mr->fid);
  retired_.clear();
}

void FabricMrCache::trim() {
  if (ranges_.size() > kMaxEntries) clear();
}

void* FabricMrCache::desc(const void* data, size_t bytes) {
  const auto addr = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = addr + bytes;
  // The range starting at or before addr that reaches furthest covers it if
  // any does; ranges are few (buffers, not messages), so a short scan back is fine.
  auto it = ranges_.upper_bound(addr);
  while (it != ranges_.begin()) {
    --it;
    if (it->second.end >= end) return it->second.mr ? fi_mr_desc(it->second.mr) : nullptr;
    if (addr - it->first > (uintptr_t{1} << 40)) break;
  }
  const uintptr_t page = page_size();
  const uintptr_t start = addr & ~(page - 1);
  const uintptr_t stop = (end + page - 1) & ~(page - 1);
  fid_mr* mr = nullptr;
  ++registrations_;
  const int rc = fi_mr_reg(domain_, reinterpret_cast<void*>(start), stop - start, FI_SEND | FI_RECV, 0, 0, 0, &mr,
                           nullptr);
  if (rc != 0) {
    if (required_) {
      fail<NetworkError>(self_, ": libfabric call failed: fi_mr_reg of ", stop - start, " bytes at ",
                         reinterpret_cast<void*>(start), ": ", fabric_strerror(-rc),
                         "; registered memory is pinned: check `ulimit -l` (RLIMIT_MEMLOCK) on this host");
    }
    mr = nullptr;
  }
  // A shorter range at the same start may be in use by a chunk in flight:
  // it is closed with the rest at clear(), not now.
  auto [slot, inserted] = ranges_.try_emplace(start, Range{stop, mr});
  if (!inserted) {
    if (slot->second.mr) retired_.push_back(slot->second.mr);
    slot->second = Range{stop, mr};
  }
  return mr ? fi_mr_desc(mr) : nullptr;
}

}  // namespace strata::parallel
#endif  // STRATA_HAVE_LIBFABRIC
