#include "framework/byte_size.h"

#include <cstdio>

namespace strata {

std::string format_bytes(size_t bytes) {
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024.0, kGiB = kMiB * 1024.0, kTiB = kGiB * 1024.0;
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= kTiB) {
    std::snprintf(buf, sizeof buf, "%.2f TiB", b / kTiB);
  } else if (b >= kGiB) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / kGiB);
  } else if (b >= kMiB) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / kMiB);
  } else if (b >= kKiB) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / kKiB);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  }
  return buf;
}

}  // namespace strata
