// Tensor's typed accessors: data<T>() is for the host and refuses a tensor
// that lives on a CUDA device with an error that says what to do, where it
// would otherwise hand out a device address for the host to crash on;
// device_data<T>() is what CUDA code takes. A CUDA tensor with no elements
// allocates nothing, so these run without a GPU and without CUDA. And large
// host tensors go back to the system when freed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/tensor.h"
#include "tests/test_util.h"

namespace strata {
namespace {

TEST(TensorAccessTest, HostAccessorRefusesACudaTensorAndSaysWhatToDo) {
  Tensor t({0, 3}, DType::kF32, Device::cuda(1));
  const std::string msg = test::error_of<Error>([&] { t.data<float>(); });
  EXPECT_CONTAINS(msg, "tensor [0, 3] f32 on cuda:1");
  EXPECT_CONTAINS(msg, "its memory is on the device");
  EXPECT_CONTAINS(msg, ".to(Device::cpu())");
  EXPECT_CONTAINS(msg, "device_data<T>()");
  const Tensor& ct = t;
  EXPECT_CONTAINS(test::error_of<Error>([&] { ct.data<float>(); }), "cuda:1");
  Tensor labels({0}, DType::kI32, Device::cuda(0));
  EXPECT_CONTAINS(test::error_of<Error>([&] { labels.data<int32_t>(); }), "i32 on cuda:0");
}

TEST(TensorAccessTest, DeviceAccessorServesEitherSide) {
  Tensor dev({0}, DType::kF32, Device::cuda(0));
  EXPECT_EQ(dev.device_data<float>(), nullptr);  // nothing allocated
  Tensor host({4});
  EXPECT_EQ(host.device_data<float>(), host.data<float>());
  const Tensor& ch = host;
  EXPECT_EQ(ch.device_data<float>(), ch.data<float>());
}

TEST(TensorAccessTest, AccessorsCheckTheElementType) {
  Tensor f({2});
  EXPECT_CONTAINS(test::error_of<Error>([&] { f.data<int32_t>(); }), "tensor holds f32 but was accessed as i32");
  EXPECT_CONTAINS(test::error_of<Error>([&] { f.device_data<uint8_t>(); }), "accessed as u8");
  // uint16_t reads the bits of either 16-bit float type.
  Tensor h({2}, DType::kF16), b({2}, DType::kBF16);
  EXPECT_NE(h.data<uint16_t>(), nullptr);
  EXPECT_NE(b.data<uint16_t>(), nullptr);
  EXPECT_NE(b.device_data<uint16_t>(), nullptr);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// The process's resident set, from /proc/self/statm (pages).
size_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t total = 0, resident = 0;
  in >> total >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Large host tensors go back to the system when freed. Sharded data
// parallel allocates a bucket's weights at every gather and frees them
// after the layers: served from malloc's heap, that grew the resident set
// by several buckets (malloc raises its mapping threshold after the first
// such free and keeps later blocks).
TEST(TensorMemory, LargeHostTensorsGoBackToTheSystemWhenFreed) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer builds keep large tensors in malloc's blocks, to check them";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer builds keep large tensors in malloc's blocks, to check them";
#endif
#endif
  const int64_t n = (int64_t{8} << 20) / 4;  // 8 MiB of floats
  { Tensor warm({n}); }                      // a first one, mapped and freed (malloc would raise its threshold)
  std::vector<Tensor> small;                 // small tensors between them, as a training step has
  const size_t before = resident_bytes();
  for (int i = 0; i < 8; ++i) {
    Tensor big({n});
    float* d = big.data<float>();
    for (int64_t k = 0; k < n; k += 1024) d[k] = 1.0f;  // touch every page
    EXPECT_EQ(d[1], 0.0f) << "a new tensor is zeros";
    small.emplace_back(Shape{64});
  }
  const size_t after = resident_bytes();
  EXPECT_LT(after, before + (size_t{4} << 20)) << "8 tensors of 8 MiB each, freed, left "
                                               << (after - before) / 1024 << " KiB resident";
}

}  // namespace
}  // namespace strata
