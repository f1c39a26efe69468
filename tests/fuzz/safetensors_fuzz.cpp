// libFuzzer target for the safetensors header parser and validator. Any input
// must either load or throw strata::Error; crashes, sanitizer reports and
// other exception types are bugs. Build (clang):
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I. -o st_fuzz
//     framework/{dtype,file_util,json,safetensors}.cpp tests/fuzz/safetensors_fuzz.cpp
//   ./st_fuzz -max_total_time=60 tests/fuzz/corpus_safetensors
#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/error.h"
#include "framework/safetensors.h"

// Keeps the compiler from dropping the reads below.
volatile unsigned g_fuzz_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const strata::SafetensorsReader r =
        strata::SafetensorsReader::from_buffer(std::vector<uint8_t>(data, data + size), "fuzz");
    // Touch every byte the reader hands out so ASan checks the bounds.
    unsigned sum = 0;
    for (const strata::TensorView& t : r.tensors()) {
      for (size_t k = 0; k < t.nbytes; ++k) sum += t.data[k];
      if (r.find(t.name) == nullptr) __builtin_trap();
    }
    for (const auto& kv : r.metadata()) sum += static_cast<unsigned>(kv.second.size());
    g_fuzz_sink = sum;
  } catch (const strata::Error&) {
  }
  return 0;
}
