// format_bytes: the one way sizes are written in messages and reports.
#include <gtest/gtest.h>

#include "framework/byte_size.h"

namespace strata {
namespace {

TEST(FormatBytesTest, PicksTheUnitAndItsPrecision) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(size_t{12} << 20), "12.0 MiB");  // tests/cli/pipeline_test.sh reads this form
  EXPECT_EQ(format_bytes((size_t{3} << 20) / 2), "1.5 MiB");
  EXPECT_EQ(format_bytes(size_t{1} << 30), "1.00 GiB");
  EXPECT_EQ(format_bytes((size_t{5} << 30) / 4), "1.25 GiB");
  EXPECT_EQ(format_bytes(size_t{80} << 30), "80.00 GiB");
  EXPECT_EQ(format_bytes(size_t{5} << 39), "2.50 TiB");
}

}  // namespace
}  // namespace strata
