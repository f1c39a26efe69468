#include "framework/filler.h"

#include <cmath>

#include "framework/error.h"

namespace strata {

const std::vector<std::string>& filler_keys() {
  static const std::vector<std::string> keys = {"type", "value", "min", "max",
                                                "mean", "std",   "variance_norm", "sparse"};
  return keys;
}

const std::vector<std::string>& filler_types() {
  static const std::vector<std::string> types = {"constant", "uniform", "gaussian", "xavier",
                                                 "glorot",   "msra",    "kaiming", "positive_unitball", "bilinear"};
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
  s.sparse = static_cast<int>(block.get_int("sparse", -1));
  if (block.has("sparse") && s.type != "gaussian") {
    fail<ConfigError>(context, " at ", block.loc().str(), ": `sparse` applies to the gaussian filler only (as in Caffe)");
  }
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
    if (s.sparse >= 0 && t.ndim() >= 1 && t.dim(0) > 0) {
      // Caffe's GaussianFiller: each weight survives with probability sparse / num_outputs.
      const float keep = static_cast<float>(s.sparse) / static_cast<float>(t.dim(0));
      for (int64_t i = 0; i < n; ++i) {
        if (!(rng.uniform() < keep)) p[i] = 0.0f;
      }
    }
  } else if (s.type == "positive_unitball") {
    // Caffe's PositiveUnitballFiller: uniform in [0, 1), each output's row scaled to sum 1.
    const int64_t rows = t.ndim() > 0 && t.dim(0) > 0 ? t.dim(0) : 1;
    const int64_t dim = n / rows;
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (int64_t k = 0; k < dim; ++k) sum += (p[r * dim + k] = rng.uniform());
      for (int64_t k = 0; k < dim; ++k) p[r * dim + k] = sum > 0 ? static_cast<float>(p[r * dim + k] / sum) : 0.0f;
    }
  } else if (s.type == "bilinear") {
    // Caffe's BilinearFiller: bilinear upsampling kernels for Deconvolution,
    // the same for every channel: w(x, y) = (1 - |x/f - c|)(1 - |y/f - c|).
    if (t.ndim() != 4 || t.dim(2) != t.dim(3)) {
      fail<ConfigError>("the bilinear filler needs a square 4-D weight (out, in, k, k), got ", t.ndim(), " dimensions");
    }
    const int64_t k = t.dim(3);
    const float f = std::ceil(static_cast<float>(k) / 2.0f);
    const float c = (2.0f * f - 1.0f - static_cast<float>(static_cast<int64_t>(f) % 2)) / (2.0f * f);
    for (int64_t i = 0; i < n; ++i) {
      const float x = static_cast<float>(i % k), y = static_cast<float>((i / k) % k);
      p[i] = (1.0f - std::fabs(x / f - c)) * (1.0f - std::fabs(y / f - c));
    }
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
