// A per-process cap on the bytes of tensor storage (`strata train
// --max-memory`), so that a test can show a model that does not fit one rank
// training across several pipeline stages. Storage (framework/tensor.cpp)
// accounts every allocation here; one beyond the cap throws an
// OutOfMemoryError that says how much was asked, the cap, and what is in use.
// Also what the machine itself can give (MemAvailable, a cgroup limit), which
// the Net's memory plan (framework/memory_plan.h) is checked against.
#pragma once

#include <cstddef>
#include <string>

#include "framework/byte_size.h"  // format_bytes, which the cap's messages and reports use
#include "framework/error.h"

namespace strata {

// A request for more memory than the cap or the machine allows, refused
// before anything was allocated, or an allocation that failed. The Net adds
// the layer it was for.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// 0 = no cap (the default).
void set_memory_cap(size_t bytes);
size_t memory_cap();
// Bytes of tensor storage alive now / the most alive at once so far.
size_t memory_in_use();
size_t memory_peak();

// Called by Storage: accounts `bytes`, or throws when the cap would be exceeded.
void memory_cap_acquire(size_t bytes);
void memory_cap_release(size_t bytes);

// Host memory this process may still take: the smaller of the kernel's
// MemAvailable and the room left under the cgroup's memory limit (v2
// memory.max, or v1 memory.limit_in_bytes), read now. `source` says which
// bound it is, for messages. SIZE_MAX / "unknown" when neither can be read.
struct MachineMemory {
  size_t available = 0;
  std::string source;
};
MachineMemory machine_memory_available();

// "64M", "1.5G", "512K", "1000000" (bytes; K/M/G are powers of 1024).
// ConfigError naming `where` otherwise.
size_t parse_memory_size(const std::string& text, const std::string& where);

}  // namespace strata
