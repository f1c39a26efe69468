// Byte counts as people read them, for every message and report that states a
// size (memory reports, the caching allocator, --max-memory, out-of-memory
// errors), so that the same size reads the same everywhere.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

// "512 B", "1.5 KiB", "12.0 MiB", "1.23 GiB", "2.50 TiB" (powers of 1024).
std::string format_bytes(size_t bytes);

}  // namespace strata
