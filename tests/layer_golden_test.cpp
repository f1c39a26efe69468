// Golden tests: every CPU layer against PyTorch, the independent oracle.
//
// Each folder in tests/golden/layers/ (written by
// tests/golden/make_layer_golden.py; see tests/golden/README.md) holds a tiny
// net (an Input layer feeding the layer under test, named "test"), its inputs,
// parameters, and the forward outputs and backward gradients PyTorch computed
// in float64. This test builds that net, loads the arrays, runs forward and
// backward through the Net, and compares with the folder's tolerance:
//   |got - want| <= atol + rtol * |want|   for every element.
// A registered layer type with no golden case fails the coverage test, so a
// new layer must bring one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/io/npy.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Data layers (LayerKind::kData) are exempt from the golden coverage rule:
// they have no bottoms to compare a computation on; the file readers are
// tested in tests/data_layers_test.cpp, and every golden net runs an Input.
// So are output layers (LayerKind::kOutput), which compute nothing.
bool exempt(const std::string& type) {
  const LayerKind kind = LayerRegistry::instance().find(type).schema().kind;
  return kind == LayerKind::kData || kind == LayerKind::kOutput;
}

std::string golden_root() { return std::string(STRATA_SOURCE_DIR) + "/tests/golden/layers"; }

// Case folders (those with a meta.txt), sorted; empty if the folder is missing.
std::vector<std::string> list_cases() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(golden_root(), ec)) {
    if (entry.is_directory() && fs::exists(entry.path() / "meta.txt")) names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// meta.txt: "key: value" lines; '#' starts a comment line.
std::map<std::string, std::string> read_meta(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read " + path);
  std::map<std::string, std::string> meta;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) throw IoError(path + ": expected 'key: value', got '" + line + "'");
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    meta[line.substr(0, colon)] = value;
  }
  return meta;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

std::string index_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = std::max<int64_t>(shape[d], 1);
    idx[d] = flat % n;
    flat /= n;
  }
  return shape_str(Shape(idx.begin(), idx.end()));
}

// Shapes agree, with any single-element shapes ({}, {1}, {1, 1}) equal:
// loss and accuracy tops are scalars however each side spells them.
bool same_shape(const Shape& a, const Shape& b) {
  if (a == b) return true;
  return shape_numel(a) == 1 && shape_numel(b) == 1;
}

// Empty when `got` matches `want` (times `factor`) within `tol`; otherwise a
// report naming the case, the tensor, the max abs and rel errors and the
// worst element. With STRATA_GOLDEN_VERBOSE set it also prints every
// comparison's errors (what the tolerances in tests/golden/README.md rest on).
std::string compare(const std::string& case_name, const std::string& what, const Tensor& got,
                    const NpyArray& want_arr, Tolerance tol, double factor = 1.0) {
  std::ostringstream os;
  os << "case '" << case_name << "', tensor '" << what << "': ";
  if (!same_shape(got.shape(), want_arr.shape)) {
    os << "shape " << shape_str(got.shape()) << ", expected " << shape_str(want_arr.shape);
    return os.str();
  }
  const int64_t n = got.numel();
  const float* g = got.data<float>();
  const float* w = want_arr.as<float>();
  double max_abs = 0.0, max_rel = 0.0, worst_excess = -1.0, max_used = 0.0;
  int64_t abs_at = 0, rel_at = 0, worst_at = -1, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = factor * static_cast<double>(w[i]);
    double err = std::fabs(static_cast<double>(g[i]) - want);
    if (std::isnan(err)) err = std::numeric_limits<double>::infinity();  // NaN, or inf vs finite
    if (static_cast<double>(g[i]) == want) err = 0.0;                     // equal infinities
    const double rel = want != 0.0 ? err / std::fabs(want) : (err > 0.0 ? err : 0.0);
    if (err > max_abs) {
      max_abs = err;
      abs_at = i;
    }
    if (rel > max_rel) {
      max_rel = rel;
      rel_at = i;
    }
    const double allowed = tol.atol + tol.rtol * std::fabs(want);
    if (allowed > 0.0) max_used = std::max(max_used, err / allowed);
    const double excess = err - allowed;
    if (excess > 0.0) {
      ++bad;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst_at = i;
      }
    }
  }
  const Shape& s = got.shape();
  if (std::getenv("STRATA_GOLDEN_VERBOSE")) {
    std::printf("  %-26s %-34s max abs err %-9.3g max rel err %-9.3g %5.1f%% of tolerance (rtol %g, atol %g)\n",
                case_name.c_str(), what.c_str(), max_abs, max_rel, 100.0 * max_used, tol.rtol, tol.atol);
  }
  if (bad == 0) return "";
  os << bad << " of " << n << " elements outside |got - want| <= " << tol.atol << " + " << tol.rtol
     << " * |want|; max abs err " << max_abs << " at " << index_str(abs_at, s) << ", max rel err " << max_rel
     << " at " << index_str(rel_at, s) << "; worst " << index_str(worst_at, s) << ": got " << g[worst_at]
     << ", want " << factor * w[worst_at];
  return os.str();
}

void copy_into(const NpyArray& a, Tensor* t, const std::string& what) {
  ASSERT_EQ(a.dtype, DType::kF32) << what << " must be float32";
  ASSERT_TRUE(same_shape(a.shape, t->shape()))
      << what << " has shape " << shape_str(a.shape) << " but the blob is " << shape_str(t->shape());
  if (a.numel() > 0) std::memcpy(t->data<float>(), a.as<float>(), static_cast<size_t>(a.numel()) * sizeof(float));
}

class LayerGolden : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir_;
  std::string case_;
  std::map<std::string, std::string> meta_;
  std::unique_ptr<Net> net_;
  int test_ = -1;
  Tolerance tol_;

  std::string path(const std::string& array) const { return dir_ + "/" + array + ".npy"; }
  bool has(const std::string& array) const { return fs::exists(path(array)); }
  NpyArray load(const std::string& array) const { return read_npy(path(array)); }
  Layer& layer() { return net_->layer(test_); }
  Blob& param_blob(const std::string& name) {
    const int i = net_->param_index("test." + name);
    STRATA_CHECK(i >= 0, "no parameter test.", name);
    return *net_->params()[i].blob;
  }
  void set_top_diffs() {
    const BlobVec& tops = net_->tops(test_);
    for (size_t t = 0; t < tops.size(); ++t) {
      const std::string d = "dout" + std::to_string(t);
      if (has(d)) copy_into(load(d), &tops[t]->diff, case_ + "/" + d);
    }
  }
  void run_dropout_stats();
};

TEST_P(LayerGolden, MatchesPyTorch) {
  case_ = GetParam();
  dir_ = golden_root() + "/" + case_;
  SCOPED_TRACE("golden case " + dir_);
  meta_ = read_meta(dir_ + "/meta.txt");
  tol_ = {std::stod(meta_.at("rtol")), std::stod(meta_.at("atol"))};
  NetOptions options;
  options.phase = meta_.at("phase") == "TEST" ? Phase::kTest : Phase::kTrain;
  net_ = Net::from_file(dir_ + "/layer.prototxt", options);
  test_ = net_->layer_index("test");
  ASSERT_EQ(layer().type(), meta_.at("type")) << "meta.txt names another layer type than layer.prototxt";

  // Inputs: in<k>.npy feeds bottom k of the layer under test.
  const BlobVec& bottoms = net_->bottoms(test_);
  for (size_t k = 0; k < bottoms.size(); ++k) {
    const std::string in = "in" + std::to_string(k);
    ASSERT_TRUE(has(in)) << "case '" << case_ << "' lacks " << in << ".npy";
    copy_into(load(in), &bottoms[k]->data, case_ + "/" + in);
  }
  if (HasFatalFailure()) return;
  // Parameters: every one of the layer's params comes from param_<name>.npy,
  // and every param_<name>.npy must name one of them.
  std::set<std::string> names;
  for (const LayerParam& p : layer().params()) {
    names.insert(p.name);
    ASSERT_TRUE(has("param_" + p.name)) << "case '" << case_ << "': " << layer().type() << " has parameter '"
                                        << p.name << "' but there is no param_" << p.name << ".npy";
    copy_into(load("param_" + p.name), &param_blob(p.name).data, case_ + "/param_" + p.name);
  }
  if (HasFatalFailure()) return;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string f = entry.path().filename();
    if (f.rfind("param_", 0) != 0 || f.find("_after.npy") != std::string::npos) continue;
    const std::string pname = f.substr(6, f.size() - 6 - 4);
    EXPECT_TRUE(names.count(pname)) << "case '" << case_ << "' has " << f << " but " << layer().type()
                                    << " has no parameter '" << pname << "'";
  }

  if (meta_.count("mode") && meta_.at("mode") == "dropout_stats") {
    run_dropout_stats();
    return;
  }

  std::set<std::string> checks;
  for (const std::string& c : split_words(meta_.at("check"))) checks.insert(c);
  std::set<std::string> done;
  auto check = [&](const std::string& what, const Tensor& got) {
    if (!checks.count(what)) return;
    done.insert(what);
    ASSERT_TRUE(has(what)) << "meta.txt of case '" << case_ << "' checks " << what << " but " << what
                           << ".npy is missing";
    const std::string msg = compare(case_, what, got, load(what), tol_);
    if (!msg.empty()) ADD_FAILURE() << msg;
  };

  net_->forward();
  const BlobVec& tops = net_->tops(test_);
  for (size_t t = 0; t < tops.size(); ++t) check("out" + std::to_string(t), tops[t]->data);
  for (const LayerParam& p : layer().params()) check("param_" + p.name + "_after", param_blob(p.name).data);

  if (meta_.at("backward") == "true") {
    ASSERT_TRUE(net_->layer_needs_backward(test_)) << "the net skips backward of the layer under test";
    net_->zero_param_diffs();
    // Bottom gradients are overwritten: NaN shows any element left unwritten.
    for (Blob* b : bottoms) b->diff.fill(std::numeric_limits<float>::quiet_NaN());
    set_top_diffs();  // loss tops: the Net writes the loss weight itself
    net_->backward();
    for (size_t k = 0; k < bottoms.size(); ++k) check("din" + std::to_string(k), bottoms[k]->diff);
    for (const LayerParam& p : layer().params()) check("dparam_" + p.name, param_blob(p.name).diff);

    // Parameter gradients accumulate: a second backward doubles them.
    bool any_dparam = false;
    for (const LayerParam& p : layer().params()) any_dparam = any_dparam || checks.count("dparam_" + p.name);
    if (any_dparam) {
      SCOPED_TRACE("second backward without zeroing: parameter gradients must accumulate (2x)");
      set_top_diffs();
      net_->backward();
      for (const LayerParam& p : layer().params()) {
        const std::string what = "dparam_" + p.name;
        if (!checks.count(what)) continue;
        const std::string msg =
            compare(case_, what + " (accumulated twice)", param_blob(p.name).diff, load(what), {tol_.rtol, 2 * tol_.atol}, 2.0);
        if (!msg.empty()) ADD_FAILURE() << msg;
      }
    }
  }
  for (const std::string& c : checks) {
    EXPECT_TRUE(done.count(c)) << "case '" << case_ << "': meta.txt checks '" << c
                               << "', which names no top, bottom or parameter of the layer";
  }
}

// Dropout at TRAIN draws its mask from our RNG, so only its statistics can be
// golden: every output is 0 or x / (1 - ratio), the kept fraction is within
// 5 sigma of 1 - ratio, and backward applies the same mask and scale.
void LayerGolden::run_dropout_stats() {
  const double ratio = std::stod(meta_.at("dropout_ratio"));
  const double scale = 1.0 / (1.0 - ratio);
  net_->forward();
  const Blob& x = *net_->bottoms(test_)[0];
  const Blob& y = *net_->tops(test_)[0];
  ASSERT_EQ(x.shape(), y.shape());
  const int64_t n = x.numel();
  const float* xv = x.data.data<float>();
  const float* yv = y.data.data<float>();
  int64_t kept = 0, wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yv[i] == 0.0f) continue;
    ++kept;
    const double want = scale * xv[i];
    if (!(std::fabs(yv[i] - want) <= tol_.atol + tol_.rtol * std::fabs(want))) {
      if (wrong++ == 0) {
        ADD_FAILURE() << "case '" << case_ << "', out0 at " << index_str(i, y.shape()) << ": got " << yv[i]
                      << ", want 0 or x / (1 - ratio) = " << want;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "case '" << case_ << "': kept outputs not scaled by 1 / (1 - " << ratio << ")";
  const double frac = static_cast<double>(kept) / static_cast<double>(n);
  const double sigma = std::sqrt(ratio * (1.0 - ratio) / static_cast<double>(n));
  EXPECT_NEAR(frac, 1.0 - ratio, 5 * sigma) << "case '" << case_ << "': kept fraction over " << n << " elements";

  Blob& xb = *net_->bottoms(test_)[0];
  xb.diff.fill(std::numeric_limits<float>::quiet_NaN());
  set_top_diffs();
  net_->backward();
  const float* dy = y.diff.data<float>();
  const float* dx = xb.diff.data<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = yv[i] == 0.0f ? 0.0 : scale * dy[i];
    if (!(std::fabs(dx[i] - want) <= tol_.atol + tol_.rtol * std::fabs(want))) {
      if (bad++ == 0) {
        ADD_FAILURE() << "case '" << case_ << "', din0 at " << index_str(i, x.shape()) << ": got " << dx[i]
                      << ", want " << want << " (mask from forward: " << (yv[i] == 0.0f ? "dropped" : "kept") << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << "case '" << case_ << "': backward does not apply the forward mask and scale";
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerGolden, ::testing::ValuesIn(list_cases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerGolden);

// A new layer must bring a golden case (tests/golden/make_layer_golden.py).
TEST(LayerGoldenCoverage, EveryRegisteredLayerHasACase) {
  const std::vector<std::string> cases = list_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases under " << golden_root()
                              << "; run /usr/bin/python3 tests/golden/make_layer_golden.py";
  std::map<std::string, int> per_type;
  for (const std::string& c : cases) ++per_type[read_meta(golden_root() + "/" + c + "/meta.txt").at("type")];
  for (const std::string& type : LayerRegistry::instance().types()) {
    if (exempt(type)) continue;
    if (per_type[type] == 0) ADD_FAILURE() << "layer type '" << type << "' is registered but has no golden case in "
                                 << golden_root() << "; add a module for it to tests/golden/layer_cases/ and run "
                                 << "/usr/bin/python3 tests/golden/make_layer_golden.py --only " << type;
  }
  for (const auto& [type, n] : per_type) {
    if (!LayerRegistry::instance().has(type))
      ADD_FAILURE() << n << " golden case(s) test layer type '" << type << "', which is not registered";
  }
}

}  // namespace
}  // namespace strata
