// Every registered layer type has a CUDA path. A layer declares one by
// overriding Layer::has_cuda() (with forward_cuda/backward_cuda, in its .cu
// file) inside `#ifdef STRATA_WITH_CUDA`; the Net refuses to put a layer
// without one on a GPU. The answer is a property of the type, so this test
// asks an instance built on the host and needs no GPU: it runs wherever the
// build has CUDA, CI included. What the CUDA path computes is compared with
// the CPU in tests/layer_cuda_test.cpp, on a machine with a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/layer_registry.h"
#include "tests/layer_test_util.h"

namespace strata {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += " " + n;
  return out;
}

TEST(LayerCudaCoverage, EveryLayerHasCuda) {
#ifndef STRATA_WITH_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (-DSTRATA_CUDA=OFF or no nvcc), so no layer has a CUDA path "
                  "to check; a CUDA build runs this test without needing a GPU";
#endif
  std::vector<std::string> missing, unbuildable;
  for (const std::string& type : LayerRegistry::instance().types()) {
    std::string why;
    const std::unique_ptr<Layer> layer = test_util::build_any(type, &why);
    if (!layer) {
      unbuildable.push_back(type + " (" + why + ")");
    } else if (!layer->has_cuda()) {
      missing.push_back(type);
    }
  }
  EXPECT_TRUE(missing.empty()) << "layer types without a CUDA implementation:" << joined(missing)
                               << "; give each a layers/<name>.cu with forward_cuda/backward_cuda and override "
                                  "has_cuda() in its header (see README.md, \"Adding a layer\")";
  EXPECT_TRUE(unbuildable.empty()) << "layer types this test cannot build to ask (teach test_util::build_any "
                                      "a config for them):"
                                   << joined(unbuildable);
}

}  // namespace
}  // namespace strata
