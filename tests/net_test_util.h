// Helpers shared by the Net tests (net_test.cpp, net_errors_test.cpp): a Net
// built from prototxt text written inline, the ConfigError it throws, and
// quick looks at its layers and parameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/tensor.h"
#include "tests/test_util.h"

namespace strata {
namespace test {

inline std::unique_ptr<Net> make_net(const std::string& text, Phase phase = Phase::kTrain, uint64_t seed = 1) {
  NetOptions options;
  options.phase = phase;
  options.seed = seed;
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), options);
}

inline std::string build_error(const std::string& text, Phase phase = Phase::kTrain) {
  return error_of<ConfigError>([&] { make_net(text, phase); });
}

inline std::vector<std::string> layer_names(const Net& net) {
  std::vector<std::string> out;
  for (int i = 0; i < net.num_layers(); ++i) out.push_back(net.layer(i).name());
  return out;
}

inline const Blob& param_blob(const Net& net, const std::string& name) {
  const int i = net.param_index(name);
  if (i < 0) throw std::runtime_error("no parameter " + name);
  return *net.params()[static_cast<size_t>(i)].blob;
}

inline bool all_zero(const Tensor& t) {
  const auto v = values(t);
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

}  // namespace test
}  // namespace strata
