#include "framework/memory_plan.h"

#include <set>

namespace strata {

namespace {
thread_local MemoryPlan* t_current = nullptr;
}  // namespace

MemoryPlan::MemoryPlan() : outer_(t_current) { t_current = this; }

MemoryPlan::~MemoryPlan() { t_current = outer_; }

MemoryPlan* MemoryPlan::current() { return t_current; }

void MemoryPlan::add(const std::shared_ptr<Storage>& storage) { entries_.push_back({storage, owner_}); }

void MemoryPlan::add_estimate(int owner, size_t bytes) { estimates_.push_back({owner, bytes}); }

MemoryPlan::Totals MemoryPlan::totals() const {
  Totals t;
  auto charge = [&t](int owner, size_t bytes) {
    if (owner < 0) return;
    if (t.by_owner.size() <= static_cast<size_t>(owner)) t.by_owner.resize(static_cast<size_t>(owner) + 1, 0);
    t.by_owner[static_cast<size_t>(owner)] += bytes;
  };
  std::set<const Storage*> seen;
  for (const Entry& e : entries_) {
    const std::shared_ptr<Storage> s = e.storage.lock();
    if (!s || !seen.insert(s.get()).second) continue;
    if (s->allocated()) {
      t.taken += s->bytes();
    } else if (s->device().is_cpu()) {
      t.host_deferred += s->bytes();
    } else {
      t.device_deferred += s->bytes();
    }
    charge(e.owner, s->bytes());
  }
  for (const auto& [owner, bytes] : estimates_) {
    t.estimated += bytes;
    charge(owner, bytes);
  }
  return t;
}

size_t MemoryPlan::bytes_except(const std::set<const void*>& ids) const {
  size_t bytes = 0;
  std::set<const void*> seen;
  for (const Entry& e : entries_) {
    const std::shared_ptr<Storage> s = e.storage.lock();
    if (s && !ids.count(s.get()) && seen.insert(s.get()).second) bytes += s->bytes();
  }
  return bytes;
}

void MemoryPlan::allocate() {
  for (const Entry& e : entries_) {
    if (const std::shared_ptr<Storage> s = e.storage.lock()) s->data();
  }
}

}  // namespace strata
