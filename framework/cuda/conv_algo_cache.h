// The host side of choosing cuDNN convolution algorithms: the settings
// (environment), the keys a choice is stored under, the cache file's format,
// and the process-wide cache that measures each problem once and remembers
// the answer in memory and on disk. Plain C++, compiled in every build, so
// that all of it is tested without a GPU; the cuDNN calls that measure live
// in framework/cuda/conv_algos.{h,cpp}.
//
// The cache file (default ~/.cache/strata/cudnn_algos.txt) is text:
//
//   # comment lines
//   strata-cudnn-algos 1                      <- format version
//   <device>\t<problem>\t<fwd>\t<bwd-data>\t<bwd-filter>
//   ...
//   end <number of entry lines>                <- absent: the file is truncated
//
// where <device> is device_key() (GPU model, compute capability, cuDNN and
// CUDA runtime versions), <problem> is ConvProblem::key(), and each of the
// three direction fields is "<direction> <ALGO> <MATH> <workspace bytes>
// <milliseconds>" (milliseconds -1 when the choice was not timed). Entries
// of other devices are kept but never used, so one file serves a home
// directory shared by machines with different GPUs. The file is rewritten
// whole, atomically (temp file, then rename), after each new measurement,
// merged with what another process may have written meanwhile: the last
// complete write wins, and a reader never sees a torn file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace strata::cuda {

// ---- settings -------------------------------------------------------------

// kFind: time the candidates (cudnnFind*AlgorithmEx) and keep the fastest
// (or the leanest near it: time_slack_percent);
// kHeuristic: cuDNN's first heuristic candidate that fits (no timing).
enum class ConvAlgoMode { kFind, kHeuristic };
// kRequired: only algorithms cuDNN reports as deterministic.
enum class Determinism { kAny, kRequired };

struct ConvAlgoSettings {
  static constexpr size_t kDefaultWorkspaceLimit = size_t{4} << 30;
  // "auto": per layer, conv_workspace_limit() below.
  static constexpr size_t kAutoWorkspaceLimit = SIZE_MAX;
  ConvAlgoMode mode = ConvAlgoMode::kFind;
  size_t workspace_limit = kDefaultWorkspaceLimit;  // per algorithm, before the free-memory cap
  Determinism determinism = Determinism::kAny;
  // A timed choice takes, of the candidates at most this many per cent
  // slower than the fastest, the one with the least workspace (0: the fastest).
  int time_slack_percent = 5;
  std::string cache_path;  // "" = keep choices in memory only
};

// Reads STRATA_CUDNN_ALGO (find | heuristic), STRATA_CUDNN_WORKSPACE_LIMIT
// (bytes, or 512M / 4G), STRATA_CUDNN_DETERMINISTIC (0 | 1),
// STRATA_CUDNN_TIME_SLACK (per cent, 0 to 100, e.g. 5 or 5%) and
// STRATA_CUDNN_CACHE (a file, or "off"; default $XDG_CACHE_HOME/strata/
// cudnn_algos.txt, else $HOME/.cache/strata/cudnn_algos.txt, else none)
// through `getenv` (unset = nullptr). ConfigError naming the variable and
// the values it takes for anything else.
using EnvLookup = std::function<const char*(const char*)>;
ConvAlgoSettings conv_algo_settings_from(const EnvLookup& getenv);
// The same from this process's environment, read at each call (cheap; it
// only happens when a convolution meets a new shape).
ConvAlgoSettings conv_algo_settings();

// The most workspace one algorithm of a layer may take (before the
// free-memory cap): the configured limit, or with "auto" the bytes of the
// layer's input and output together, at least 64 MiB and at most 4 GiB, so a
// workspace never costs more than the activations the layer computes. Not the
// default: on an H100 (2026-11-27) it trained VGG-16 at batch 64 in 5.8 GiB
// instead of 9.1 GiB, but at 309 images/s instead of 685.
size_t conv_workspace_limit(const ConvAlgoSettings& settings, size_t input_bytes, size_t output_bytes);

// ---- keys -----------------------------------------------------------------

// Everything a convolution algorithm's speed and validity depend on.
struct ConvProblem {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0;                       // output channels
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t group = 1;
  std::string dtype = "f32";
  std::string layout = "NCHW";
  int math = 0;  // the cudnnMathType_t the descriptor asks for (conv_math_name)
  Determinism determinism = Determinism::kAny;
  int time_slack_percent = 5;  // ConvAlgoSettings::time_slack_percent

  // "n64 c3 h224 w224 k64 r3x3 p1x1 s1x1 d1x1 g1 f32 NCHW math=FMA any slack=5%"
  std::string key() const;
};

// "NVIDIA H200 sm_90 cudnn=90800 cudart=13000" (tabs and line breaks in the
// name become spaces, so the key fits one field of the file).
std::string device_key(const std::string& gpu_name, int cc_major, int cc_minor, int64_t cudnn_version,
                       int cudart_version);

// ---- choices --------------------------------------------------------------

enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };
constexpr int kConvDirections = 3;

// Names of the cuDNN enumerators without their prefix, by value
// ("IMPLICIT_PRECOMP_GEMM" is CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
// = 1); framework/cuda/conv_algos.cpp checks them against cudnn.h at compile
// time. "" for a value out of range.
const char* conv_algo_name(ConvDirection d, int algo);
int conv_algo_count(ConvDirection d);
const char* conv_math_name(int math);  // DEFAULT, TENSOR_OP, TENSOR_OP_ALLOW_CONVERSION, FMA
const char* conv_direction_name(ConvDirection d);  // fwd, bwd-data, bwd-filter

struct ConvAlgoPick {
  int algo = -1;
  int math = 0;
  uint64_t workspace_bytes = 0;
  double ms = -1.0;  // measured time; -1 when not timed
  bool operator==(const ConvAlgoPick& o) const {
    return algo == o.algo && math == o.math && workspace_bytes == o.workspace_bytes && ms == o.ms;
  }
};

struct ConvAlgoChoice {
  ConvAlgoPick pick[kConvDirections];  // by ConvDirection
  ConvAlgoPick& operator[](ConvDirection d) { return pick[static_cast<int>(d)]; }
  const ConvAlgoPick& operator[](ConvDirection d) const { return pick[static_cast<int>(d)]; }
  bool operator==(const ConvAlgoChoice& o) const {
    return pick[0] == o.pick[0] && pick[1] == o.pick[1] && pick[2] == o.pick[2];
  }
};

// "fwd IMPLICIT_PRECOMP_GEMM 0 B, bwd-data ALGO_1 12.0 MiB, bwd-filter FFT_TILING 1.50 GiB"
std::string describe(const ConvAlgoChoice& c);

// ---- the file -------------------------------------------------------------

// (device key, problem key) -> choice.
using ConvAlgoTable = std::map<std::pair<std::string, std::string>, ConvAlgoChoice>;

constexpr int kConvAlgoFileVersion = 1;
std::string format_conv_algo_file(const ConvAlgoTable& table);
// Throws IoError saying what is wrong ("line 3: ...", "truncated: ...",
// "format version 2, this build reads 1") without naming the file.
ConvAlgoTable parse_conv_algo_file(const std::string& text);

// ---- the cache ------------------------------------------------------------

enum class ConvAlgoOrigin { kMemory, kFile, kMeasured };
const char* conv_algo_origin_name(ConvAlgoOrigin o);  // "remembered", "from the cache file", "measured"

struct ConvAlgoLookup {
  ConvAlgoChoice choice;
  ConvAlgoOrigin origin = ConvAlgoOrigin::kMeasured;
};

struct ConvAlgoCacheStats {
  int64_t memory_hits = 0;
  int64_t file_hits = 0;
  int64_t measurements = 0;
  int64_t file_writes = 0;
};

class ConvAlgoCache {
 public:
  using Warn = std::function<void(const std::string&)>;
  // `warn` gets one line per problem with a file (default: stderr, as
  // "warning: <line>"). Problems with the file never throw.
  explicit ConvAlgoCache(Warn warn = {});

  // The choice for `problem` on `device`: this process's earlier one, else
  // the file's at `path` ("" = no file), else measure()'s, which is then
  // remembered and merged into the file. A remembered or stored choice that
  // accept() refuses (an algorithm this shape no longer supports, a
  // workspace over today's budget) is measured again and replaced.
  // Exceptions from measure() propagate; nothing is stored then.
  ConvAlgoLookup find_or_measure(const std::string& path, const std::string& device, const std::string& problem,
                                 const std::function<ConvAlgoChoice()>& measure,
                                 const std::function<bool(const ConvAlgoChoice&)>& accept);

  ConvAlgoCacheStats stats() const;
  // Forgets the choices held in memory and the loaded file (the file stays),
  // as if the process had just started: what tests of the file need.
  void forget_for_testing();

 private:
  void load_locked(const std::string& path);
  void store_locked(const std::string& path, const std::string& device, const std::string& problem,
                    const ConvAlgoChoice& choice);
  void warn_once_locked(const std::string& path, const std::string& what, const std::string& line);

  Warn warn_;
  mutable std::mutex mu_;
  ConvAlgoTable memory_;        // this process's choices (measured or read)
  std::map<std::string, ConvAlgoTable> measured_;  // by file: what this process adds to it
  std::string loaded_path_;     // the file memory_ was filled from
  bool loaded_ = false;
  ConvAlgoTable file_;          // that file's entries
  std::set<std::pair<std::string, std::string>> warned_;  // (path, kind) already warned about
  ConvAlgoCacheStats stats_;
};

// The one cache of this process (every convolution layer, every device).
ConvAlgoCache& conv_algo_cache();

}  // namespace strata::cuda
