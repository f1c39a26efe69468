// The clock arithmetic of the GPU lane of the timeline (device_timeline.h):
// a span's event that completed `ms` before the anchor lies ms * 1000 us
// before the anchor's host time, rounded to the nearest microsecond. The
// spans themselves need a GPU: tests/cli/timeline_gpu_test.sh.
#include "framework/cuda/device_timeline.h"

#include <gtest/gtest.h>

namespace strata::cuda {
namespace {

TEST(DeviceTimeline, EventTimesAreCountedBackFromTheAnchor) {
  EXPECT_EQ(device_time_us(1'000'000, 0.0f), 1'000'000);
  EXPECT_EQ(device_time_us(1'000'000, 1.5f), 998'500);
  EXPECT_EQ(device_time_us(1'000'000, 0.0004f), 1'000'000);  // 0.4 us rounds to 0
  EXPECT_EQ(device_time_us(1'000'000, 0.0006f), 999'999);    // 0.6 us rounds to 1
  // A later event is nearer the anchor, so it maps to a later time.
  EXPECT_LT(device_time_us(5'000'000, 2.0f), device_time_us(5'000'000, 1.0f));
  // Long runs: 20 minutes before the anchor keeps microsecond resolution.
  EXPECT_EQ(device_time_us(10'000'000'000LL, 1'200'000.0f), 10'000'000'000LL - 1'200'000'000LL);
}

}  // namespace
}  // namespace strata::cuda
