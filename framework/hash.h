// FNV-1a, 64 bit: a small, stable, non-cryptographic hash for fingerprints
// that are compared across processes and stored in snapshots (solver config
// fingerprints, parameter signatures, transport prefixes). The value must
// never change: old snapshots hold it.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;

// Pass the previous result as `h` to hash a sequence piece by piece.
inline uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffset) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace strata
