// A per-process cap on the bytes of tensor storage (`strata train
// --max-memory`), so that a test can show a model that does not fit one rank
// training across several pipeline stages. Storage (framework/tensor.cpp)
// accounts every allocation here; one beyond the cap throws an Error that
// says how much was asked, the cap, and what is in use.
#pragma once

#include <cstddef>
#include <string>

#include "framework/byte_size.h"  // format_bytes, which the cap's messages and reports use

namespace strata {

// 0 = no cap (the default).
void set_memory_cap(size_t bytes);
size_t memory_cap();
// Bytes of tensor storage alive now / the most alive at once so far.
size_t memory_in_use();
size_t memory_peak();

// Called by Storage: accounts `bytes`, or throws when the cap would be exceeded.
void memory_cap_acquire(size_t bytes);
void memory_cap_release(size_t bytes);

// "64M", "1.5G", "512K", "1000000" (bytes; K/M/G are powers of 1024).
// ConfigError naming `where` otherwise.
size_t parse_memory_size(const std::string& text, const std::string& where);

}  // namespace strata
