// Memory registrations of a fabric transport, made once per buffer and
// reused (only compiled with libfabric).
//
// Providers that drive RDMA hardware (verbs) need every local buffer
// registered: registration pins the pages and gives the device their
// translation, and costs tens of microseconds per call, far more than a
// small message. The cache keys registrations by address range: a buffer
// inside a range registered before reuses it, so the gradient buckets and
// collective workspaces of a training run are registered on the first step
// and never again (count() is asserted in tests). Ranges are whole pages.
//
// A buffer that is freed and reallocated at the same address keeps its old
// registration. On verbs the registration pins the old pages, so the cache
// must not outlive the memory it covers: callers keep their buffers for the
// life of the communicator (buckets, workspaces), and the cache is cleared
// (trim) once it holds more than kMaxEntries ranges, which bounds what a
// caller with short-lived buffers can pin. trim() runs only between
// transfers, when no operation uses a registration.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::parallel {

class FabricMrCache {
 public:
  static constexpr size_t kMaxEntries = 256;

  // `required`: the provider needs registered local buffers (FI_MR_LOCAL);
  // then a failed registration is an error, otherwise it only costs the
  // provider's own bounce buffers (desc() answers nullptr).
  FabricMrCache(fid_domain* domain, bool required, std::string self);
  ~FabricMrCache();
  FabricMrCache(const FabricMrCache&) = delete;
  FabricMrCache& operator=(const FabricMrCache&) = delete;

  // The descriptor for [data, data + bytes), registering its pages on the
  // first use. NetworkError naming the call when a required registration fails.
  void* desc(const void* data, size_t bytes);
  // Deregisters everything once more than kMaxEntries ranges are cached.
  void trim();
  void clear();

  size_t count() const { return registrations_; }  // fi_mr_reg calls so far
  size_t entries() const { return ranges_.size(); }

 private:
  struct Range {
    uintptr_t end;
    fid_mr* mr;  // nullptr: registration failed and is optional
  };
  fid_domain* domain_;
  bool required_;
  std::string self_;
  std::map<uintptr_t, Range> ranges_;  // by start address
  std::vector<fid_mr*> retired_;       // replaced by a longer range at the same start
  size_t registrations_ = 0;
};

}  // namespace strata::parallel
