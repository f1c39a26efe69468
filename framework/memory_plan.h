// MemoryPlan: what a Net will take before it takes it. While a plan is open
// on a thread, every tensor storage created there is deferred (sized, not
// allocated; framework/tensor.h) and recorded under the plan's current
// owner (the layer being set up). The Net adds up the plan, compares it with
// --max-memory and with what the machine can give, and only then allocates
// (allocate()), so an impossible batch size is refused at once, naming the
// layer that needs the most, instead of failing deep inside an allocation.
//
// Storage a layer touches while it is being set up (parameters its fillers
// write, a data set it loads) is allocated then, one tensor at a time, each
// checked against the machine by Storage itself; the plan still counts it.
#pragma once

#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace strata {

class MemoryPlan {
 public:
  // Opens the plan on this thread (a plan opened inside another hides it
  // until it closes).
  MemoryPlan();
  // Closes it. Storage still deferred stays so, and allocates on first use.
  ~MemoryPlan();
  MemoryPlan(const MemoryPlan&) = delete;
  MemoryPlan& operator=(const MemoryPlan&) = delete;

  // The plan open on this thread, or nullptr.
  static MemoryPlan* current();

  // Whom the storage created from now on is for: an index (the Net's layer
  // index) that Totals::by_owner reports by.
  void set_owner(int owner) { owner_ = owner; }
  void add(const std::shared_ptr<Storage>& storage);
  // Memory that will be taken later by someone else on an owner's behalf
  // (the optimizer's history of its parameters).
  void add_estimate(int owner, size_t bytes);

  struct Totals {
    size_t host_deferred = 0;    // host memory not taken yet
    size_t device_deferred = 0;  // device memory not taken yet
    size_t taken = 0;            // already allocated while the plan was open (still alive)
    size_t estimated = 0;        // add_estimate()
    std::vector<size_t> by_owner;  // everything above, per owner (index = owner)
    size_t total() const { return host_deferred + device_deferred + taken + estimated; }
  };
  // Storage freed since it was recorded is not counted; shared storage once.
  Totals totals() const;

  // Bytes of the live storages recorded here whose storage_id() is not in
  // `ids` (each counted once): what layers keep besides the net's blobs.
  size_t bytes_except(const std::set<const void*>& ids) const;

  // Takes the memory of every deferred storage still alive.
  void allocate();

 private:
  struct Entry {
    std::weak_ptr<Storage> storage;
    int owner;
  };
  std::vector<Entry> entries_;
  std::vector<std::pair<int, size_t>> estimates_;
  int owner_ = -1;
  MemoryPlan* outer_ = nullptr;
};

}  // namespace strata
