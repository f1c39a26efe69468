// Helpers used across the test files: the message of an expected exception,
// a substring assertion, a temp folder removed afterwards, small file writers,
// skipping a GPU test on a machine without one, and running one registered
// layer by hand (no Net).
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/layer.h"
#include "framework/layer_registry.h"
#include "framework/tensor.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

#ifndef EXPECT_CONTAINS
#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "missing '" << (part) << "' in: " << (text)
#endif

#ifdef STRATA_WITH_CUDA
// Skips the running test, saying why, where this build has CUDA but the
// machine has no GPU (or no driver); `unchecked` says what then goes
// untested. The CUDA code itself is still compiled.
#define STRATA_SKIP_WITHOUT_GPU(unchecked)                                                         \
  do {                                                                                             \
    if (::strata::cuda::device_count() == 0) {                                                     \
      GTEST_SKIP() << "no CUDA device: this machine has no GPU (or no driver); " << (unchecked);   \
    }                                                                                              \
  } while (0)
#endif

namespace strata {
namespace test {

// The message of the E thrown by f; a test failure if f throws nothing or another type.
template <typename E, typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

// A fresh folder under ::testing::TempDir() named "<prefix>_XXXXXX", removed
// with everything in it when this goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "strata_test") {
    std::string tmpl = ::testing::TempDir() + prefix + "_XXXXXX";
    if (!::mkdtemp(&tmpl[0])) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // The names of the entries in the folder, sorted.
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path_, ec)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "writing " << path;
}

// ---- one layer, run by hand ----

// A registered layer built from `layer { name: "l" type: "<type>" <body> }`.
inline std::unique_ptr<Layer> make_layer(const std::string& type, const std::string& body = "",
                                         Phase phase = Phase::kTrain, uint64_t seed = 1) {
  const ConfigNode root =
      parse_config_text("layer { name: \"l\" type: \"" + type + "\" " + body + " }", "test.prototxt");
  LayerSpec spec;
  spec.name = "l";
  spec.type = type;
  spec.node = root.children().at(0);
  LayerContext ctx;
  ctx.phase = phase;
  ctx.seed = seed;
  return LayerRegistry::instance().find(type).create(spec, ctx);
}

inline void set_values(Tensor& t, const std::vector<float>& v) {
  ASSERT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::copy(v.begin(), v.end(), t.data<float>());
}

// Resizes b to `shape` and fills its data with v.
inline void set(Blob& b, const Shape& shape, const std::vector<float>& v) {
  b.resize(shape);
  set_values(b.data, v);
}

inline void set_diff(Blob& b, const std::vector<float>& v) { set_values(b.diff, v); }

inline std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// Element-wise, relative to max(1, |want|).
inline void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-6f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at index " << i;
  }
}

// setup + reshape + forward.
inline void forward(Layer& l, const BlobVec& bottom, const BlobVec& top) {
  l.setup(bottom, top);
  l.reshape(bottom, top);
  l.forward_cpu(bottom, top);
}

// Backward into every bottom.
inline void backward(Layer& l, const BlobVec& top, const BlobVec& bottom) {
  l.backward_cpu(top, std::vector<bool>(bottom.size(), true), bottom);
}

// Runs `body`, expects an ErrorType whose message contains every `parts` entry.
template <typename ErrorType, typename Body>
void expect_error(Body body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "expected an error mentioning '" << parts.at(0) << "'";
  } catch (const ErrorType& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "missing '" << p << "' in: " << what;
  }
}

}  // namespace test
}  // namespace strata
