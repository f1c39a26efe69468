// convert_to_f32: what checkpoints and pretrained weights loading use to read
// f16 and bf16 tensors out of a (possibly unaligned) file mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "framework/dtype.h"

namespace strata {
namespace {

TEST(ConvertToF32Test, CopiesF32AndWidensBothHalfTypesFromUnalignedBytes) {
  const std::vector<float> want = {1.0f, -2.5f, 0.0f, 65504.0f};
  std::vector<uint8_t> bytes(1 + want.size() * sizeof(float));
  std::vector<float> got(want.size());

  std::memcpy(bytes.data() + 1, want.data(), want.size() * sizeof(float));
  ASSERT_TRUE(convert_to_f32(DType::kF32, bytes.data() + 1, got.data(), 4));
  EXPECT_EQ(got, want);

  for (DType t : {DType::kF16, DType::kBF16}) {
    for (size_t i = 0; i < want.size(); ++i) {
      const uint16_t h = t == DType::kF16 ? float_to_f16(want[i]) : float_to_bf16(want[i]);
      std::memcpy(bytes.data() + 1 + 2 * i, &h, 2);  // odd address: the file need not align it
    }
    std::fill(got.begin(), got.end(), 7.0f);
    ASSERT_TRUE(convert_to_f32(t, bytes.data() + 1, got.data(), 4)) << dtype_name(t);
    for (size_t i = 0; i < want.size(); ++i) {
      const uint16_t h = t == DType::kF16 ? float_to_f16(want[i]) : float_to_bf16(want[i]);
      EXPECT_EQ(got[i], t == DType::kF16 ? f16_to_float(h) : bf16_to_float(h)) << dtype_name(t) << " " << i;
    }
  }
  EXPECT_EQ(got[1], -2.5f);  // exact in both half types
}

TEST(ConvertToF32Test, RefusesIntegerTypesAndWritesNothing) {
  const int32_t ints[2] = {1, 2};
  float out[2] = {9.0f, 9.0f};
  EXPECT_FALSE(convert_to_f32(DType::kI32, ints, out, 2));
  EXPECT_FALSE(convert_to_f32(DType::kU8, ints, out, 2));
  EXPECT_EQ(out[0], 9.0f);
  EXPECT_EQ(out[1], 9.0f);
}

}  // namespace
}  // namespace strata
