// CRC-32C (Castagnoli), the checksum snapshots carry per tensor so that a file
// damaged after it was written (a flipped bit on disk or in a copy) is caught
// on load, naming the tensor. SSE4.2's crc32 instruction where the CPU has it
// (about 10 GB/s), else a byte table; both give the same values
// (crc32c("123456789") == 0xE3069283).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// `crc` continues an earlier call's result over more bytes (0 to start).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// The same without the hardware path (for tests and CPUs without SSE4.2).
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc = 0);
// "e3069283": eight lowercase hex digits, as snapshots store it.
std::string crc32c_hex(uint32_t crc);

}  // namespace strata
