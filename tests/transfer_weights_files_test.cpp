// Damaged weight files reach the user as clear IoErrors through
// load_pretrained, and every seed of the safetensors fuzz corpus
// (tests/fuzz/corpus_safetensors) is replayed here, so each validation case
// -- truncated data, out-of-range and overlapping offsets, byte counts that
// do not fit the dtype, oversize headers -- is checked on every test run,
// not only under libFuzzer.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/io/safetensors.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"
#include "transfer/pretrained.h"

#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR "."
#endif

namespace strata {
namespace {

using test::error_of;

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TransferWeightsFiles, FuzzCorpusSeedsAreAcceptedOrRejectedForTheirReason) {
  const std::map<std::string, std::string> invalid = {
      {"invalid_dtype", "unsupported dtype 'F64'"},
      {"invalid_dtype_size", "do not match dtype F32 and shape [5, 6] (expected 120 bytes)"},
      {"invalid_end_before_begin", "end before they begin"},
      {"invalid_header_len", "exceeds the format's limit"},
      {"invalid_header_over_limit", "header length 100000001 exceeds the format's limit"},
      {"invalid_hole", "bytes [0, 4) of the data buffer belong to no tensor"},
      {"invalid_json", "not valid JSON"},
      {"invalid_offsets_beyond", "go beyond the end of the data buffer (8 bytes; truncated file?)"},
      {"invalid_overlap", "overlap"},
      {"invalid_short", "too short"},
      {"invalid_truncated", "tensor 'b' data_offsets [8, 16] go beyond the end of the data buffer (12 bytes; truncated"},
  };
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fuzz/corpus_safetensors";
  int seen_valid = 0, seen_invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const std::vector<uint8_t> bytes = read_all(entry.path().string());
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_NO_THROW(SafetensorsReader::from_buffer(bytes, name)) << name;
      ++seen_valid;
      continue;
    }
    auto it = invalid.find(name);
    ASSERT_NE(it, invalid.end()) << "corpus seed " << name << " has no expected message in this test";
    const std::string msg = error_of<IoError>([&] { SafetensorsReader::from_buffer(bytes, name); });
    EXPECT_CONTAINS(msg, name + ": ");
    EXPECT_CONTAINS(msg, it->second);
    ++seen_invalid;
  }
  EXPECT_EQ(seen_invalid, static_cast<int>(invalid.size()));
  EXPECT_GE(seen_valid, 3);
}

TEST(TransferWeightsFiles, TruncatedFileIsAnIoErrorNamingIt) {
  test::TempDir dir("strata_transfer_files_test");
  std::vector<float> w(64, 0.25f);
  write_safetensors(dir.file("w.safetensors"), {{"fc.weight", DType::kF32, {8, 8}, w.data()}}, {});
  std::vector<uint8_t> bytes = read_all(dir.file("w.safetensors"));
  bytes.resize(bytes.size() - 100);
  test::write_bytes(dir.file("cut.safetensors"), bytes);
  auto net = test::make_net("layer { name: \"in\" type: \"Input\" top: \"x\" input_param { shape { dim: 1 dim: 8 } } }\n"
                            "layer { name: \"fc\" type: \"InnerProduct\" bottom: \"x\" top: \"y\" "
                            "inner_product_param { num_output: 8 } }");
  const std::string msg =
      error_of<IoError>([&] { transfer::load_pretrained(*net, dir.file("cut.safetensors"), {}); });
  EXPECT_CONTAINS(msg, dir.file("cut.safetensors"));
  EXPECT_CONTAINS(msg, "truncated");
}

}  // namespace
}  // namespace strata
