// libFuzzer target for the safetensors header parser and validator. Any input
// must either load or throw strata::Error; crashes, sanitizer reports and
// other exception types are bugs. `bash tools/run_tests.sh fuzz` builds it
// with clang (tests/fuzz/CMakeLists.txt) and runs it over the seeds; by hand:
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF
//   cmake --build build-fuzz --target strata_fuzz_safetensors
//   mkdir -p /tmp/st_new && build-fuzz/strata_fuzz_safetensors -max_total_time=60 /tmp/st_new tests/fuzz/corpus_safetensors
// Seeds (tests/fuzz/corpus_safetensors; tests/transfer_weights_files_test.cpp
// replays each one on every test run and checks its error message):
//   valid_empty, valid_two_tensors, valid_zero_elem   files that load
//   invalid_short                 shorter than the 8-byte length field
//   invalid_header_len            header length far beyond the file (2^40)
//   invalid_header_over_limit     header length just over the 100 MB limit
//   invalid_json                  header that is not JSON
//   invalid_dtype                 a dtype strata does not read (F64)
//   invalid_dtype_size            byte range that does not fit dtype x shape
//   invalid_end_before_begin      data_offsets [8, 0]
//   invalid_offsets_beyond        data_offsets past the data buffer
//   invalid_truncated             a valid file cut inside its data
//   invalid_overlap, invalid_hole tensors that overlap / leave bytes unused
#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/error.h"
#include "framework/io/safetensors.h"

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
