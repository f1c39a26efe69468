#include "framework/memory_cap.h"

#include <atomic>
#include <cmath>
#include <cstdlib>

#include "framework/error.h"

namespace strata {

namespace {
std::atomic<size_t> g_cap{0};
std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};
}  // namespace

void set_memory_cap(size_t bytes) { g_cap = bytes; }
size_t memory_cap() { return g_cap; }
size_t memory_in_use() { return g_in_use; }
size_t memory_peak() { return g_peak; }

void memory_cap_acquire(size_t bytes) {
  const size_t now = g_in_use.fetch_add(bytes) + bytes;
  const size_t cap = g_cap;
  if (cap > 0 && now > cap) {
    g_in_use.fetch_sub(bytes);
    fail<Error>("out of memory under --max-memory: a tensor of ", format_bytes(bytes), " was asked for with ",
                format_bytes(now - bytes), " in use, over the cap of ", format_bytes(cap),
                "; split the model over more ranks with --pp (pipeline stages), or raise --max-memory");
  }
  size_t peak = g_peak;
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

void memory_cap_release(size_t bytes) { g_in_use.fetch_sub(bytes); }

size_t parse_memory_size(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double mult = 1.0;
  if (end && *end) {
    const char u = *end;
    if (u == 'K' || u == 'k') mult = 1024.0;
    else if (u == 'M' || u == 'm') mult = 1024.0 * 1024.0;
    else if (u == 'G' || u == 'g') mult = 1024.0 * 1024.0 * 1024.0;
    else end = nullptr;
    if (end) ++end;
    if (end && (*end == 'B' || *end == 'b' || *end == 'i')) ++end;
    if (end && *end == 'B') ++end;
  }
  if (text.empty() || !end || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    fail<ConfigError>(where, ": expected a size in bytes such as 64M, 1.5G or 1048576, got '", text, "'");
  }
  return static_cast<size_t>(v * mult);
}

}  // namespace strata
