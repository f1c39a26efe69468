// Tensor's typed accessors: data<T>() is for the host and refuses a tensor
// that lives on a CUDA device with an error that says what to do, where it
// would otherwise hand out a device address for the host to crash on;
// device_data<T>() is what CUDA code takes. A CUDA tensor with no elements
// allocates nothing, so these run without a GPU and without CUDA.
#include <gtest/gtest.h>

#include <string>

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
