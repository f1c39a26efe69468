// BatchPipeline (transfer/batch_pipeline.h): batches come back in the order
// they went, each with its own values, while the next one is staged; on a
// GPU through pinned buffers and queued copies.
#include <gtest/gtest.h>

#include <vector>

#include "framework/error.h"
#include "framework/tensor.h"
#include "tests/test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif
#include "transfer/batch_pipeline.h"

namespace strata {
namespace {

// Sends batches of varying sizes through `device`: the "net" is the device
// tensor itself (sent in, read back out), so what comes back must be what went in.
void round_trip(Device device) {
  BatchPipeline pipe(device);
  const std::vector<int64_t> sizes = {5, 5, 3, 7, 1, 4};
  std::vector<std::vector<float>> sent;
  size_t received = 0;
  auto check_oldest = [&] {
    const BatchPipeline::Finished f = pipe.finish_oldest();
    const std::vector<float>& want = sent.at(received++);
    ASSERT_EQ(f.floats, static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(f.data[i], want[i]) << "batch " << received - 1 << " at " << i;
  };
  for (size_t b = 0; b < sizes.size(); ++b) {
    if (pipe.in_flight() == BatchPipeline::kSlots) check_oldest();
    const int64_t n = sizes[b] * 3;
    float* in = pipe.input(n);
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(100 * b + i);
    std::copy(values.begin(), values.end(), in);
    sent.push_back(values);
    Tensor on_device({sizes[b], 3}, DType::kF32, device);
    pipe.send_input(on_device);
    pipe.receive_output(on_device);
    EXPECT_LE(pipe.in_flight(), BatchPipeline::kSlots);
  }
  while (pipe.in_flight() > 0) check_oldest();
  EXPECT_EQ(received, sizes.size());
}

TEST(BatchPipeline, BatchesComeBackInOrderWithTheirOwnValuesOnTheCpu) { round_trip(Device::cpu()); }

TEST(BatchPipeline, ATooDeepPipelineIsRefused) {
  BatchPipeline pipe(Device::cpu());
  Tensor t({2}, DType::kF32, Device::cpu());
  for (int k = 0; k < BatchPipeline::kSlots; ++k) {
    pipe.input(2);
    pipe.send_input(t);
    pipe.receive_output(t);
  }
  EXPECT_THROW(pipe.input(2), Error);
  pipe.finish_oldest();
  EXPECT_NO_THROW(pipe.input(2));
  Tensor half({2}, DType::kBF16, Device::cpu());
  EXPECT_THROW(pipe.receive_output(half), Error);
}

#ifdef STRATA_WITH_CUDA
TEST(BatchPipeline, BatchesComeBackInOrderWithTheirOwnValuesOnAGpu) {
  STRATA_SKIP_WITHOUT_GPU("the pinned, queued copies of BatchPipeline are compile-tested only");
  round_trip(Device::cuda(0));
}
#endif

}  // namespace
}  // namespace strata
