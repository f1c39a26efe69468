// The parameter gradients in one flat buffer (framework/net_params.cpp):
// the updated parameters' gradients lie one after another in the order
// backward finishes them, each at a 256-byte boundary; a run of them is one
// view (what data parallel reduces in place); freezing a parameter lays the
// buffer out again without losing what the gradients hold.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/net.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// Parameters: 0 ip1.weight [16, 64], 1 ip1.bias [16], 2 ip2.weight [5, 16],
// 3 ip2.bias [5]. Backward finishes ip2's first, then ip1's.
const char* kChain = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 64 } shape { dim: 2 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "z" inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }
)";

std::unique_ptr<Net> make_net(BlobMemory memory, Phase phase = Phase::kTrain) {
  NetOptions o;
  o.blob_memory = memory;
  o.phase = phase;
  return std::make_unique<Net>(parse_config_text(kChain, "net.prototxt"), o);
}

// Element offset of `t` from `base` (both views of one storage).
int64_t offset_of(const Tensor& t, const Tensor& base) {
  return (static_cast<const char*>(t.raw_data()) - static_cast<const char*>(base.raw_data())) /
         static_cast<int64_t>(sizeof(float));
}

TEST(NetGradients, UpdatedGradientsLieInOneBufferInTheOrderBackwardFinishesThem) {
  const auto net = make_net(BlobMemory::kByLifetime);
  const std::optional<Tensor> all = net->gradient_view({2, 3, 0, 1});
  ASSERT_TRUE(all.has_value());
  // 80 floats at 0, 5 at 128 (80 rounded up to 64s), 1024 at 192, 16 at 1216.
  EXPECT_EQ(all->numel(), 1216 + 16);
  const std::vector<int64_t> want = {192, 1216, 0, 128};
  for (int id = 0; id < 4; ++id) {
    const Tensor& diff = net->params()[static_cast<size_t>(id)].blob->diff;
    EXPECT_TRUE(diff.shares_storage_with(*all)) << id;
    EXPECT_EQ(offset_of(diff, *all), want[static_cast<size_t>(id)]) << id;
  }
  const std::optional<Tensor> ip1 = net->gradient_view({0, 1});
  ASSERT_TRUE(ip1.has_value());
  EXPECT_EQ(ip1->numel(), 1216 + 16 - 192);
  EXPECT_EQ(offset_of(*ip1, *all), 192);
  EXPECT_FALSE(net->gradient_view({3, 2}).has_value());  // not in buffer order
  EXPECT_FALSE(net->gradient_view({2, 0}).has_value());  // skips ip2.bias
  // The report counts each gradient once, as before.
  EXPECT_EQ(net->memory_report().grad_bytes, make_net(BlobMemory::kSeparate)->memory_report().grad_bytes);
}

TEST(NetGradients, SeparateAndForwardOnlyNetsHaveNoFlatBuffer) {
  const auto separate = make_net(BlobMemory::kSeparate);
  EXPECT_FALSE(separate->gradient_view({2}).has_value());
  EXPECT_FALSE(separate->params()[0].blob->diff.shares_storage_with(separate->params()[1].blob->diff));
  const auto inference = make_net(BlobMemory::kByLifetime, Phase::kTest);
  EXPECT_FALSE(inference->gradient_view({2}).has_value());
}

TEST(NetGradients, FreezingAParameterLaysTheBufferOutAgainKeepingTheGradients) {
  const auto net = make_net(BlobMemory::kByLifetime);
  net->forward_backward();
  std::vector<std::vector<float>> before;
  for (const NetParam& p : net->params()) before.push_back(test::values(p.blob->diff));
  net->set_lr_mult(2, 0.0f);  // ip2.weight frozen: out of the buffer
  const std::optional<Tensor> rest = net->gradient_view({3, 0, 1});
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(offset_of(net->params()[3].blob->diff, *rest), 0);
  EXPECT_FALSE(net->params()[2].blob->diff.shares_storage_with(*rest));
  for (size_t id = 0; id < 4; ++id) EXPECT_EQ(test::values(net->params()[id].blob->diff), before[id]) << id;
  net->zero_param_diffs();
  for (const NetParam& p : net->params()) {
    for (float v : test::values(p.blob->diff)) ASSERT_EQ(v, 0.0f) << p.name;
  }
}

}  // namespace
}  // namespace strata
