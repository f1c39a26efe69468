// The host side of cuDNN algorithm selection (framework/cuda/conv_algo_cache.h),
// which runs without a GPU: the settings from the environment, the keys, the
// cache file's round trip, and the cache itself with an injected measurement:
// a choice is measured once and then reused from memory and from the file;
// a corrupt, truncated or foreign-version file is ignored with one warning
// that names it; entries of another GPU or cuDNN are not used but kept; a
// failed write leaves the old file whole and only warns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "framework/cuda/conv_algo_cache.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using cuda::ConvAlgoCache;
using cuda::ConvAlgoChoice;
using cuda::ConvAlgoOrigin;
using cuda::ConvAlgoTable;
using cuda::ConvDirection;

const std::string kH200 = "NVIDIA H200 sm_90 cudnn=90800 cudart=13000";
const std::string kA100 = "NVIDIA A100-SXM4-80GB sm_80 cudnn=90800 cudart=13000";

ConvAlgoChoice choice(int fwd, int bwd_data, int bwd_filter, uint64_t bytes = 0) {
  ConvAlgoChoice c;
  c[ConvDirection::kForward] = {fwd, 0, bytes, 1.5};
  c[ConvDirection::kBackwardData] = {bwd_data, 1, bytes * 2, 2.25};
  c[ConvDirection::kBackwardFilter] = {bwd_filter, 3, 0, -1};
  return c;
}

cuda::ConvProblem vgg_conv1_2() {
  cuda::ConvProblem p;
  p.n = 64;
  p.c = 64;
  p.h = 224;
  p.w = 224;
  p.k = 64;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  p.math = 0;
  return p;
}

// A cache whose warnings are collected, and a measurement that counts its calls.
struct Fixture {
  test::TempDir dir{"strata_conv_algo"};
  std::vector<std::string> warnings;
  ConvAlgoCache cache{[this](const std::string& w) { warnings.push_back(w); }};
  int measured = 0;
  ConvAlgoChoice next = choice(7, 5, 6, 1 << 20);

  std::string path() const { return dir.file("cudnn_algos.txt"); }
  cuda::ConvAlgoLookup get(const std::string& device, const std::string& problem, bool accept = true) {
    return cache.find_or_measure(
        path(), device, problem,
        [this] {
          ++measured;
          return next;
        },
        [accept](const ConvAlgoChoice&) { return accept; });
  }
};

std::string read(const std::string& path) { return read_file_bytes(path); }

// ---- settings ----

cuda::ConvAlgoSettings settings(const std::map<std::string, std::string>& env) {
  return cuda::conv_algo_settings_from([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ConvAlgoSettings, DefaultsMeasureWithinFourGiBAndCacheUnderHome) {
  const cuda::ConvAlgoSettings s = settings({{"HOME", "/home/u"}});
  EXPECT_EQ(s.mode, cuda::ConvAlgoMode::kFind);
  EXPECT_EQ(s.workspace_limit, size_t{4} << 30);
  constexpr size_t MiB = size_t{1} << 20;
  EXPECT_EQ(cuda::conv_workspace_limit(s, MiB, MiB), size_t{4} << 30);
  // auto: VGG-16's conv1_2 at batch 64 has 784 MiB in and 784 MiB out.
  const cuda::ConvAlgoSettings a = settings({{"STRATA_CUDNN_WORKSPACE_LIMIT", "auto"}});
  EXPECT_EQ(a.workspace_limit, cuda::ConvAlgoSettings::kAutoWorkspaceLimit);
  EXPECT_EQ(cuda::conv_workspace_limit(a, 784 * MiB, 784 * MiB), 1568 * MiB);
  EXPECT_EQ(cuda::conv_workspace_limit(a, MiB, 2 * MiB), 64 * MiB);                     // at least
  EXPECT_EQ(cuda::conv_workspace_limit(a, 3000 * MiB, 3000 * MiB), size_t{4} << 30);  // at most
  // A limit given is the limit, whatever the layer's size.
  EXPECT_EQ(cuda::conv_workspace_limit(settings({{"STRATA_CUDNN_WORKSPACE_LIMIT", "8G"}}), MiB, MiB),
            size_t{8} << 30);
  EXPECT_EQ(s.determinism, cuda::Determinism::kAny);
  EXPECT_EQ(s.cache_path, "/home/u/.cache/strata/cudnn_algos.txt");
  EXPECT_EQ(settings({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}}).cache_path, "/xdg/strata/cudnn_algos.txt");
  EXPECT_EQ(settings({}).cache_path, "");  // no home: memory only
}

TEST(ConvAlgoSettings, EnvironmentChoosesModeLimitDeterminismAndFile) {
  const cuda::ConvAlgoSettings s = settings({{"STRATA_CUDNN_ALGO", "heuristic"},
                                             {"STRATA_CUDNN_WORKSPACE_LIMIT", "512M"},
                                             {"STRATA_CUDNN_DETERMINISTIC", "1"},
                                             {"STRATA_CUDNN_CACHE", "/tmp/x.txt"},
                                             {"HOME", "/home/u"}});
  EXPECT_EQ(s.mode, cuda::ConvAlgoMode::kHeuristic);
  EXPECT_EQ(s.workspace_limit, size_t{512} << 20);
  EXPECT_EQ(s.determinism, cuda::Determinism::kRequired);
  EXPECT_EQ(s.cache_path, "/tmp/x.txt");
  EXPECT_EQ(settings({{"STRATA_CUDNN_CACHE", "off"}, {"HOME", "/home/u"}}).cache_path, "");
  EXPECT_EQ(settings({{"STRATA_CUDNN_WORKSPACE_LIMIT", "0"}}).workspace_limit, 0u);
  EXPECT_EQ(settings({{"STRATA_CUDNN_ALGO", "find"}}).mode, cuda::ConvAlgoMode::kFind);
  EXPECT_EQ(settings({}).time_slack_percent, 5);
  EXPECT_EQ(settings({{"STRATA_CUDNN_TIME_SLACK", "0"}}).time_slack_percent, 0);
  EXPECT_EQ(settings({{"STRATA_CUDNN_TIME_SLACK", "12%"}}).time_slack_percent, 12);
  EXPECT_EQ(settings({{"STRATA_CUDNN_TIME_SLACK", "100"}}).time_slack_percent, 100);
}

TEST(ConvAlgoSettings, BadValuesNameTheVariableAndTheChoices) {
  test::expect_error<ConfigError>([] { settings({{"STRATA_CUDNN_ALGO", "fastest"}}); },
                                  {"STRATA_CUDNN_ALGO", "fastest", "find", "heuristic"});
  test::expect_error<ConfigError>([] { settings({{"STRATA_CUDNN_WORKSPACE_LIMIT", "lots"}}); },
                                  {"STRATA_CUDNN_WORKSPACE_LIMIT", "lots"});
  test::expect_error<ConfigError>([] { settings({{"STRATA_CUDNN_DETERMINISTIC", "yes"}}); },
                                  {"STRATA_CUDNN_DETERMINISTIC", "yes", "1"});
  for (const char* bad : {"0.05", "101", "-1", "%", "five"}) {
    test::expect_error<ConfigError>([&] { settings({{"STRATA_CUDNN_TIME_SLACK", bad}}); },
                                    {"STRATA_CUDNN_TIME_SLACK", std::string("'") + bad + "'", "0 to 100"});
  }
}

// ---- keys and names ----

TEST(ConvAlgoKeys, ProblemKeyNamesShapeGeometryTypeLayoutMathAndDeterminism) {
  cuda::ConvProblem p = vgg_conv1_2();
  EXPECT_EQ(p.key(), "n64 c64 h224 w224 k64 r3x3 p1x1 s1x1 d1x1 g1 f32 NCHW math=DEFAULT any slack=5%");
  p.math = 3;
  p.determinism = cuda::Determinism::kRequired;
  p.group = 2;
  p.time_slack_percent = 0;
  EXPECT_EQ(p.key(), "n64 c64 h224 w224 k64 r3x3 p1x1 s1x1 d1x1 g2 f32 NCHW math=FMA deterministic slack=0%");
}

TEST(ConvAlgoKeys, DeviceKeyHoldsModelCapabilityAndVersionsOnOneField) {
  EXPECT_EQ(cuda::device_key("NVIDIA H200", 9, 0, 90800, 13000), kH200);
  EXPECT_EQ(cuda::device_key("odd\tname\n", 8, 6, 1, 2), "odd name  sm_86 cudnn=1 cudart=2");
}

TEST(ConvAlgoKeys, AlgorithmNamesFollowCudnnEnumerators) {
  EXPECT_STREQ(cuda::conv_algo_name(ConvDirection::kForward, 1), "IMPLICIT_PRECOMP_GEMM");
  EXPECT_STREQ(cuda::conv_algo_name(ConvDirection::kForward, 7), "WINOGRAD_NONFUSED");
  EXPECT_STREQ(cuda::conv_algo_name(ConvDirection::kBackwardData, 3), "FFT_TILING");
  EXPECT_STREQ(cuda::conv_algo_name(ConvDirection::kBackwardFilter, 6), "FFT_TILING");
  EXPECT_STREQ(cuda::conv_algo_name(ConvDirection::kBackwardFilter, 7), "");
  EXPECT_EQ(cuda::conv_algo_count(ConvDirection::kForward), 8);
  EXPECT_EQ(cuda::conv_algo_count(ConvDirection::kBackwardData), 6);
  EXPECT_EQ(cuda::conv_algo_count(ConvDirection::kBackwardFilter), 7);
  EXPECT_EQ(cuda::describe(choice(1, 5, 6, 3 << 20)),
            "fwd IMPLICIT_PRECOMP_GEMM 3.0 MiB, bwd-data WINOGRAD_NONFUSED 6.0 MiB, bwd-filter FFT_TILING 0 B");
}

// ---- the file format ----

TEST(ConvAlgoFile, RoundTripsEveryEntry) {
  ConvAlgoTable t;
  t[{kH200, vgg_conv1_2().key()}] = choice(7, 5, 6, 123456789);
  t[{kA100, "n1 c3 h8 w8 k4 r1x1 p0x0 s1x1 d1x1 g1 f32 NCHW math=FMA any"}] = choice(0, 0, 0);
  const std::string text = cuda::format_conv_algo_file(t);
  EXPECT_CONTAINS(text, "strata-cudnn-algos 1\n");
  EXPECT_CONTAINS(text, "fwd WINOGRAD_NONFUSED DEFAULT 123456789 1.5");
  EXPECT_CONTAINS(text, "\nend 2\n");
  EXPECT_EQ(cuda::parse_conv_algo_file(text), t);
  EXPECT_TRUE(cuda::parse_conv_algo_file(cuda::format_conv_algo_file({})).empty());
}

TEST(ConvAlgoFile, DamageIsNamed) {
  ConvAlgoTable t;
  t[{kH200, "p"}] = choice(1, 1, 1);
  const std::string good = cuda::format_conv_algo_file(t);
  auto error = [](const std::string& text) {
    return test::error_of<IoError>([&] { cuda::parse_conv_algo_file(text); });
  };
  EXPECT_CONTAINS(error(good.substr(0, good.size() - 1)), "truncated");        // cut in the last line
  EXPECT_CONTAINS(error(good.substr(0, good.find("end "))), "truncated");      // the end line lost
  EXPECT_CONTAINS(error(""), "header");
  EXPECT_CONTAINS(error("strata-cudnn-algos 2\nend 0\n"), "format version 2");
  std::string bad_algo = good;
  bad_algo.replace(bad_algo.find("IMPLICIT_PRECOMP_GEMM"), 21, "SPEEDY");
  EXPECT_CONTAINS(error(bad_algo), "unknown fwd algorithm 'SPEEDY'");
  std::string bad_count = good;
  bad_count.replace(bad_count.find("end 1"), 5, "end 3");
  EXPECT_CONTAINS(error(bad_count), "counts 3 entries");
  EXPECT_CONTAINS(error("strata-cudnn-algos 1\nonly one field\nend 1\n"), "line 2");
}

// ---- the cache ----

TEST(ConvAlgoCacheTest, MeasuresOnceThenRemembersAndWritesTheFile) {
  Fixture f;
  const std::string problem = vgg_conv1_2().key();
  const cuda::ConvAlgoLookup first = f.get(kH200, problem);
  EXPECT_EQ(first.origin, ConvAlgoOrigin::kMeasured);
  EXPECT_EQ(first.choice, f.next);
  const cuda::ConvAlgoLookup second = f.get(kH200, problem);  // a second layer of the same shape
  EXPECT_EQ(second.origin, ConvAlgoOrigin::kMemory);
  EXPECT_EQ(second.choice, f.next);
  EXPECT_EQ(f.measured, 1);
  EXPECT_TRUE(f.warnings.empty());
  const ConvAlgoTable on_disk = cuda::parse_conv_algo_file(read(f.path()));
  ASSERT_EQ(on_disk.size(), 1u);
  EXPECT_EQ(on_disk.at({kH200, problem}), f.next);
  EXPECT_EQ(f.dir.list(), std::vector<std::string>{"cudnn_algos.txt"});  // no temp file left behind
}

TEST(ConvAlgoCacheTest, ANewProcessReusesTheFileWithoutMeasuring) {
  Fixture f;
  f.get(kH200, "p1");
  f.cache.forget_for_testing();  // as a new process
  f.next = choice(0, 0, 0);
  const cuda::ConvAlgoLookup again = f.get(kH200, "p1");
  EXPECT_EQ(again.origin, ConvAlgoOrigin::kFile);
  EXPECT_EQ(again.choice, choice(7, 5, 6, 1 << 20));
  EXPECT_EQ(f.measured, 1);
  EXPECT_EQ(f.cache.stats().file_hits, 1);
}

TEST(ConvAlgoCacheTest, ARefusedChoiceIsMeasuredAgainAndReplaced) {
  Fixture f;
  f.get(kH200, "p1");
  f.cache.forget_for_testing();
  f.next = choice(1, 1, 1);
  const cuda::ConvAlgoLookup again = f.get(kH200, "p1", /*accept=*/false);
  EXPECT_EQ(again.origin, ConvAlgoOrigin::kMeasured);
  EXPECT_EQ(f.measured, 2);
  EXPECT_EQ(cuda::parse_conv_algo_file(read(f.path())).at({kH200, "p1"}), choice(1, 1, 1));
}

TEST(ConvAlgoCacheTest, ForeignGpuOrCudnnEntriesAreNotUsedButKept) {
  Fixture f;
  ConvAlgoTable t;
  t[{kA100, "p1"}] = choice(2, 2, 2);
  t[{"NVIDIA H200 sm_90 cudnn=90100 cudart=12040", "p1"}] = choice(3, 3, 3);  // an older cuDNN
  test::write_text(f.path(), cuda::format_conv_algo_file(t));
  const cuda::ConvAlgoLookup got = f.get(kH200, "p1");
  EXPECT_EQ(got.origin, ConvAlgoOrigin::kMeasured);
  EXPECT_EQ(f.measured, 1);
  EXPECT_TRUE(f.warnings.empty());
  const ConvAlgoTable after = cuda::parse_conv_algo_file(read(f.path()));
  EXPECT_EQ(after.size(), 3u);
  EXPECT_EQ(after.at({kA100, "p1"}), choice(2, 2, 2));
}

TEST(ConvAlgoCacheTest, CorruptTruncatedOrForeignVersionFileIsIgnoredWithOneWarning) {
  ConvAlgoTable t;
  t[{kH200, "p1"}] = choice(1, 1, 1);
  const std::string good = cuda::format_conv_algo_file(t);
  for (const std::string& damaged :
       {std::string("\x7f" "ELF garbage\n"), good.substr(0, good.size() / 2),
        std::string("strata-cudnn-algos 9\nend 0\n")}) {
    Fixture f;
    test::write_text(f.path(), damaged);
    EXPECT_EQ(f.get(kH200, "p1").origin, ConvAlgoOrigin::kMeasured);
    f.get(kH200, "p2");
    EXPECT_EQ(f.measured, 2);
    ASSERT_EQ(f.warnings.size(), 1u) << "one warning per file, not per lookup";
    EXPECT_CONTAINS(f.warnings[0], f.path());
    EXPECT_CONTAINS(f.warnings[0], "delete it");
    // The damaged file was replaced by a good one holding the new choices.
    EXPECT_EQ(cuda::parse_conv_algo_file(read(f.path())).size(), 2u);
  }
}

TEST(ConvAlgoCacheTest, TwoProcessesMergeTheirEntries) {
  Fixture a;
  std::vector<std::string> warnings;
  ConvAlgoCache other([&](const std::string& w) { warnings.push_back(w); });
  a.get(kH200, "p1");
  // Another process, same file: it read nothing yet, then adds its own.
  const ConvAlgoChoice theirs = choice(0, 1, 2);
  other.find_or_measure(a.path(), kH200, "p2", [&] { return theirs; }, [](const ConvAlgoChoice&) { return true; });
  a.get(kH200, "p3");  // the first writes again: it must keep p2
  const ConvAlgoTable after = cuda::parse_conv_algo_file(read(a.path()));
  EXPECT_EQ(after.size(), 3u);
  EXPECT_EQ(after.at({kH200, "p2"}), theirs);
  EXPECT_TRUE(warnings.empty());
}

TEST(ConvAlgoCacheTest, AFailedWriteLeavesTheOldFileWholeAndOnlyWarns) {
  Fixture f;
  f.get(kH200, "p1");
  const std::string before = read(f.path());
  // The temporary file cannot be created (a folder holds its name), so the
  // write fails after the new contents were made.
  std::filesystem::create_directory(f.path() + ".tmp." + std::to_string(::getpid()));
  EXPECT_EQ(f.get(kH200, "p2").origin, ConvAlgoOrigin::kMeasured);
  f.get(kH200, "p3");
  EXPECT_EQ(read(f.path()), before);
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_CONTAINS(f.warnings[0], "cannot write the cuDNN algorithm cache " + f.path());
  EXPECT_CONTAINS(f.warnings[0], "STRATA_CUDNN_CACHE");
  // Still remembered in memory for this run.
  EXPECT_EQ(f.get(kH200, "p2").origin, ConvAlgoOrigin::kMemory);
}

TEST(ConvAlgoCacheTest, AnUnwritableCacheFolderIsAWarningNotAnError) {
  Fixture f;
  test::write_text(f.dir.file("not_a_dir"), "x");
  const std::string path = f.dir.file("not_a_dir/strata/cudnn_algos.txt");
  const cuda::ConvAlgoLookup got =
      f.cache.find_or_measure(path, kH200, "p1", [&] { return f.next; }, [](const ConvAlgoChoice&) { return true; });
  EXPECT_EQ(got.origin, ConvAlgoOrigin::kMeasured);
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_CONTAINS(f.warnings[0], path);
}

TEST(ConvAlgoCacheTest, WithoutAFileChoicesStayInMemory) {
  Fixture f;
  auto get = [&](const std::string& p) {
    return f.cache.find_or_measure(
        "", kH200, p,
        [&] {
          ++f.measured;
          return f.next;
        },
        [](const ConvAlgoChoice&) { return true; });
  };
  get("p1");
  EXPECT_EQ(get("p1").origin, ConvAlgoOrigin::kMemory);
  EXPECT_EQ(f.measured, 1);
  EXPECT_EQ(f.dir.list(), std::vector<std::string>{});
}

TEST(ConvAlgoCacheTest, AThrowingMeasurementStoresNothing) {
  Fixture f;
  EXPECT_THROW(f.cache.find_or_measure(f.path(), kH200, "p1", []() -> ConvAlgoChoice { throw Error("cuDNN broke"); },
                                       [](const ConvAlgoChoice&) { return true; }),
               Error);
  EXPECT_FALSE(file_exists(f.path()));
  EXPECT_EQ(f.get(kH200, "p1").origin, ConvAlgoOrigin::kMeasured);
}

}  // namespace
}  // namespace strata
