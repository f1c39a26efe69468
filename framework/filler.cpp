#include "framework/filler.h"

#include <cmath>

#include "framework/error.h"

namespace strata {

const std::vector<std::string>& filler_keys() {
  static const std::vector<std::string> keys = {"type", "value", "min", "max",
                                                "mean", "std",   "variance_norm"};
  return keys;
}

const std::vector<std::string>& filler_types() {
  static const std::vector<std::string> types = {"constant", "uniform", "gaussian", "xavier",
                                                 "glorot",   "msra",    "kaiming"};
  return types;
}

FillerSpec parse_filler(const ConfigNode& block, const FillerSpec& def, const std::string& context) {
  if (block.children().empty()) return def;
  block.check_keys(filler_keys(), context);
  FillerSpec s;
  s.type = block.get_enum("type", filler_types(), "constant");
  s.value = static_cast<float>(block.get_double("value", 0.0));
  s.min = static_cast<float>(block.get_double("min", 0.0));
  s.max = static_cast<float>(block.get_double("max", 1.0));
  s.mean = static_cast<float>(block.get_double("mean", 0.0));
  s.std = static_cast<float>(block.get_double("std", 1.0));
  s.variance_norm = block.get_enum("variance_norm", {"FAN_IN", "FAN_OUT", "AVERAGE"}, "FAN_IN");
  if (s.type == "uniform" && s.max < s.min) {
    fail<ConfigError>(context, " at ", block.loc().str(), ": uniform filler needs min <= max (got min ",
                      s.min, ", max ", s.max, ")");
  }
  if (s.type == "gaussian" && s.std < 0) {
    fail<ConfigError>(context, " at ", block.loc().str(), ": gaussian filler needs std >= 0");
  }
  return s;
}

FillerSpec default_weight_filler() {
  FillerSpec s;
  s.type = "xavier";
  return s;
}

namespace {
float fan_scale(const FillerSpec& s, const Tensor& t) {
  const double n = static_cast<double>(t.numel());
  const double fan_in = t.ndim() > 0 && t.dim(0) > 0 ? n / t.dim(0) : 1.0;
  const double fan_out = t.ndim() > 1 && t.dim(1) > 0 ? n / t.dim(1) : 1.0;
  double fan = fan_in;
  if (s.variance_norm == "FAN_OUT") fan = fan_out;
  if (s.variance_norm == "AVERAGE") fan = (fan_in + fan_out) / 2.0;
  return static_cast<float>(fan > 0 ? fan : 1.0);
}
}  // namespace

void fill(const FillerSpec& s, Tensor& t, Rng& rng) {
  float* p = t.data<float>();
  const int64_t n = t.numel();
  if (s.type == "constant") {
    for (int64_t i = 0; i < n; ++i) p[i] = s.value;
  } else if (s.type == "uniform") {
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(s.min, s.max);
  } else if (s.type == "gaussian") {
    for (int64_t i = 0; i < n; ++i) p[i] = rng.gaussian(s.mean, s.std);
  } else if (s.type == "xavier" || s.type == "glorot") {
    const float a = std::sqrt(3.0f / fan_scale(s, t));
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(-a, a);
  } else if (s.type == "msra" || s.type == "kaiming") {
    const float sd = std::sqrt(2.0f / fan_scale(s, t));
    for (int64_t i = 0; i < n; ++i) p[i] = rng.gaussian(0.0f, sd);
  } else {
    fail<ConfigError>("unknown filler type '", s.type, "'");
  }
}

}  // namespace strata
