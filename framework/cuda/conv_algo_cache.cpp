#include "framework/cuda/conv_algo_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iterator>
#include <sstream>
#include <vector>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/memory_cap.h"

namespace strata::cuda {

namespace {

// By enumerator value, as in cudnn_ops.h (cuDNN 9); conv_algos.cpp
// static_asserts the values and counts.
const char* const kFwdNames[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                 "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const char* const kBwdDataNames[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const char* const kBwdFilterNames[] = {"ALGO_0",   "ALGO_1",   "FFT",       "ALGO_3",
                                       "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
const char* const kMathNames[] = {"DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION", "FMA"};

template <size_t N>
int find_name(const char* const (&names)[N], const std::string& name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<int>(i);
  }
  return -1;
}

int find_algo(ConvDirection d, const std::string& name) {
  switch (d) {
    case ConvDirection::kForward: return find_name(kFwdNames, name);
    case ConvDirection::kBackwardData: return find_name(kBwdDataNames, name);
    case ConvDirection::kBackwardFilter: return find_name(kBwdFilterNames, name);
  }
  return -1;
}

const ConvDirection kAllDirections[kConvDirections] = {ConvDirection::kForward, ConvDirection::kBackwardData,
                                                       ConvDirection::kBackwardFilter};

std::string env_value(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  return v ? std::string(v) : std::string();
}

std::string default_cache_path(const EnvLookup& getenv) {
  const std::string xdg = env_value(getenv, "XDG_CACHE_HOME");
  if (!xdg.empty()) return join_path(xdg, "strata/cudnn_algos.txt");
  const std::string home = env_value(getenv, "HOME");
  if (!home.empty()) return join_path(home, ".cache/strata/cudnn_algos.txt");
  return "";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

[[noreturn]] void bad_line(size_t line, const std::string& what) { fail<IoError>("line ", line, ": ", what); }

// "<direction> <ALGO> <MATH> <bytes> <ms>"
ConvAlgoPick parse_pick(ConvDirection d, const std::string& field, size_t line) {
  std::istringstream in(field);
  std::string dir, algo, math, extra;
  uint64_t bytes = 0;
  double ms = 0;
  if (!(in >> dir >> algo >> math >> bytes >> ms) || (in >> extra)) {
    bad_line(line, "expected '" + std::string(conv_direction_name(d)) + " <ALGO> <MATH> <bytes> <ms>', got '" +
                       field + "'");
  }
  if (dir != conv_direction_name(d)) {
    bad_line(line, "expected the " + std::string(conv_direction_name(d)) + " field, got '" + dir + "'");
  }
  ConvAlgoPick p;
  p.algo = find_algo(d, algo);
  if (p.algo < 0) bad_line(line, "unknown " + dir + " algorithm '" + algo + "'");
  p.math = find_name(kMathNames, math);
  if (p.math < 0) bad_line(line, "unknown math type '" + math + "'");
  p.workspace_bytes = bytes;
  p.ms = ms;
  return p;
}

void default_warn(const std::string& line) { std::fprintf(stderr, "warning: %s\n", line.c_str()); }

}  // namespace

// ---- settings -------------------------------------------------------------

ConvAlgoSettings conv_algo_settings_from(const EnvLookup& getenv) {
  ConvAlgoSettings s;
  const std::string mode = env_value(getenv, "STRATA_CUDNN_ALGO");
  if (mode == "find" || mode.empty()) {
    s.mode = ConvAlgoMode::kFind;
  } else if (mode == "heuristic") {
    s.mode = ConvAlgoMode::kHeuristic;
  } else {
    fail<ConfigError>("STRATA_CUDNN_ALGO is '", mode, "': expected 'find' (time cuDNN's convolution algorithms, "
                      "the default) or 'heuristic' (take cuDNN's first heuristic candidate)");
  }
  const std::string limit = env_value(getenv, "STRATA_CUDNN_WORKSPACE_LIMIT");
  if (limit == "0") {
    s.workspace_limit = 0;
  } else if (limit == "auto") {
    s.workspace_limit = ConvAlgoSettings::kAutoWorkspaceLimit;
  } else if (!limit.empty()) {
    s.workspace_limit = parse_memory_size(limit, "STRATA_CUDNN_WORKSPACE_LIMIT");
  }
  const std::string det = env_value(getenv, "STRATA_CUDNN_DETERMINISTIC");
  if (det == "1") {
    s.determinism = Determinism::kRequired;
  } else if (det == "0" || det.empty()) {
    s.determinism = Determinism::kAny;
  } else {
    fail<ConfigError>("STRATA_CUDNN_DETERMINISTIC is '", det, "': expected 1 (deterministic cuDNN convolution "
                      "algorithms only) or 0 (any, the default)");
  }
  std::string slack = env_value(getenv, "STRATA_CUDNN_TIME_SLACK");
  if (!slack.empty()) {
    if (slack.back() == '%') slack.pop_back();
    const bool digits = !slack.empty() && slack.size() <= 3 &&
                        slack.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(slack) > 100) {
      fail<ConfigError>("STRATA_CUDNN_TIME_SLACK is '", env_value(getenv, "STRATA_CUDNN_TIME_SLACK"),
                        "': expected a whole per cent from 0 to 100 (e.g. 5 or 5%): of the convolution algorithms "
                        "at most that much slower than the fastest, the one with the least workspace is taken; "
                        "0 takes the fastest");
    }
    s.time_slack_percent = std::stoi(slack);
  }
  const char* path = getenv("STRATA_CUDNN_CACHE");
  if (path && std::string(path) == "off") {
    s.cache_path.clear();
  } else if (path && *path) {
    s.cache_path = path;
  } else {
    s.cache_path = default_cache_path(getenv);
  }
  return s;
}

ConvAlgoSettings conv_algo_settings() {
  return conv_algo_settings_from([](const char* name) { return std::getenv(name); });
}

size_t conv_workspace_limit(const ConvAlgoSettings& settings, size_t input_bytes, size_t output_bytes) {
  if (settings.workspace_limit != ConvAlgoSettings::kAutoWorkspaceLimit) return settings.workspace_limit;
  constexpr size_t kLeast = size_t{64} << 20, kMost = size_t{4} << 30;
  return std::min(kMost, std::max(kLeast, input_bytes + output_bytes));
}

// ---- keys -----------------------------------------------------------------

std::string ConvProblem::key() const {
  std::ostringstream os;
  os << 'n' << n << " c" << c << " h" << h << " w" << w << " k" << k << " r" << kernel_h << 'x' << kernel_w << " p"
     << pad_h << 'x' << pad_w << " s" << stride_h << 'x' << stride_w << " d" << dilation_h << 'x' << dilation_w
     << " g" << group << ' ' << dtype << ' ' << layout << " math=" << conv_math_name(math) << ' '
     << (determinism == Determinism::kRequired ? "deterministic" : "any") << " slack=" << time_slack_percent << '%';
  return os.str();
}

std::string device_key(const std::string& gpu_name, int cc_major, int cc_minor, int64_t cudnn_version,
                       int cudart_version) {
  std::string name = gpu_name;
  for (char& ch : name) {
    if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
  }
  std::ostringstream os;
  os << name << " sm_" << cc_major << cc_minor << " cudnn=" << cudnn_version << " cudart=" << cudart_version;
  return os.str();
}

// ---- choices --------------------------------------------------------------

const char* conv_algo_name(ConvDirection d, int algo) {
  if (algo < 0 || algo >= conv_algo_count(d)) return "";
  switch (d) {
    case ConvDirection::kForward: return kFwdNames[algo];
    case ConvDirection::kBackwardData: return kBwdDataNames[algo];
    case ConvDirection::kBackwardFilter: return kBwdFilterNames[algo];
  }
  return "";
}

int conv_algo_count(ConvDirection d) {
  switch (d) {
    case ConvDirection::kForward: return static_cast<int>(std::size(kFwdNames));
    case ConvDirection::kBackwardData: return static_cast<int>(std::size(kBwdDataNames));
    case ConvDirection::kBackwardFilter: return static_cast<int>(std::size(kBwdFilterNames));
  }
  return 0;
}

const char* conv_math_name(int math) {
  return math >= 0 && math < static_cast<int>(std::size(kMathNames)) ? kMathNames[math] : "";
}

const char* conv_direction_name(ConvDirection d) {
  switch (d) {
    case ConvDirection::kForward: return "fwd";
    case ConvDirection::kBackwardData: return "bwd-data";
    case ConvDirection::kBackwardFilter: return "bwd-filter";
  }
  return "";
}

std::string describe(const ConvAlgoChoice& c) {
  std::string s;
  for (ConvDirection d : kAllDirections) {
    if (!s.empty()) s += ", ";
    s += std::string(conv_direction_name(d)) + " " + conv_algo_name(d, c[d].algo) + " " +
         format_bytes(static_cast<size_t>(c[d].workspace_bytes));
  }
  return s;
}

// ---- the file -------------------------------------------------------------

std::string format_conv_algo_file(const ConvAlgoTable& table) {
  std::ostringstream os;
  os << "# cuDNN convolution algorithms measured by strata (STRATA_CUDNN_ALGO=find), per GPU and cuDNN version.\n"
        "# Rewritten whole after each new measurement; safe to delete (they are measured again).\n"
     << "strata-cudnn-algos " << kConvAlgoFileVersion << "\n";
  os << std::setprecision(6);
  for (const auto& [key, choice] : table) {
    os << key.first << '\t' << key.second;
    for (ConvDirection d : kAllDirections) {
      const ConvAlgoPick& p = choice[d];
      os << '\t' << conv_direction_name(d) << ' ' << conv_algo_name(d, p.algo) << ' ' << conv_math_name(p.math)
         << ' ' << p.workspace_bytes << ' ' << p.ms;
    }
    os << '\n';
  }
  os << "end " << table.size() << "\n";
  return os.str();
}

ConvAlgoTable parse_conv_algo_file(const std::string& text) {
  ConvAlgoTable table;
  bool header = false, ended = false;
  size_t entries = 0, line_no = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      // Every line the writer writes ends in a line break.
      fail<IoError>("truncated: the last line (", line_no + 1, ") has no line break");
    }
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    if (ended) bad_line(line_no, "text after the 'end' line");
    if (!header) {
      int version = 0;
      char rest = 0;
      if (std::sscanf(line.c_str(), "strata-cudnn-algos %d%c", &version, &rest) != 1) {
        bad_line(line_no, "expected the header 'strata-cudnn-algos " + std::to_string(kConvAlgoFileVersion) +
                              "', got '" + line + "'");
      }
      if (version != kConvAlgoFileVersion) {
        fail<IoError>("format version ", version, ", and this build reads version ", kConvAlgoFileVersion,
                      " (written by another version of strata)");
      }
      header = true;
      continue;
    }
    if (line.compare(0, 4, "end ") == 0) {
      const std::string count = line.substr(4);
      if (count.empty() || count.size() > 18 || count.find_first_not_of("0123456789") != std::string::npos ||
          std::stoull(count) != entries) {
        bad_line(line_no, "the 'end' line counts " + count + " entries, but " + std::to_string(entries) +
                              " precede it");
      }
      ended = true;
      continue;
    }
    const std::vector<std::string> fields = split(line, '\t');
    if (fields.size() != 2 + kConvDirections) {
      bad_line(line_no, "expected 5 tab-separated fields (device, problem, fwd, bwd-data, bwd-filter), got " +
                            std::to_string(fields.size()));
    }
    if (fields[0].empty() || fields[1].empty()) bad_line(line_no, "empty device or problem key");
    ConvAlgoChoice c;
    for (int i = 0; i < kConvDirections; ++i) c.pick[i] = parse_pick(kAllDirections[i], fields[2 + i], line_no);
    table[{fields[0], fields[1]}] = c;  // a repeated key: the later line wins
    ++entries;
  }
  if (!header) fail<IoError>("empty, or no 'strata-cudnn-algos' header");
  if (!ended) fail<IoError>("truncated: no 'end' line after its ", entries, " entries");
  return table;
}

// ---- the cache ------------------------------------------------------------

const char* conv_algo_origin_name(ConvAlgoOrigin o) {
  switch (o) {
    case ConvAlgoOrigin::kMemory: return "remembered";
    case ConvAlgoOrigin::kFile: return "from the cache file";
    case ConvAlgoOrigin::kMeasured: return "measured";
  }
  return "";
}

ConvAlgoCache::ConvAlgoCache(Warn warn) : warn_(warn ? std::move(warn) : Warn(default_warn)) {}

void ConvAlgoCache::warn_once_locked(const std::string& path, const std::string& what, const std::string& line) {
  if (!warned_.insert({path, what}).second) return;
  warn_(line);
}

void ConvAlgoCache::load_locked(const std::string& path) {
  loaded_ = true;
  loaded_path_ = path;
  file_.clear();
  if (!file_exists(path)) return;
  try {
    file_ = parse_conv_algo_file(read_file_bytes(path));
  } catch (const Error& e) {
    file_.clear();
    warn_once_locked(path, "read",
                     path + ": ignoring this cuDNN algorithm cache: " + e.what() +
                         ". The algorithms are measured again and the file rewritten; delete it if this "
                         "warning comes back, or set STRATA_CUDNN_CACHE=off");
  }
}

void ConvAlgoCache::store_locked(const std::string& path, const std::string& device, const std::string& problem,
                                 const ConvAlgoChoice& choice) {
  ConvAlgoTable& mine = measured_[path];
  mine[{device, problem}] = choice;
  try {
    const std::string dir = dirname_of(path);
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) fail<IoError>("cannot create directory '", dir, "': ", ec.message());
    }
    // Merge with what is there now: another process may have added entries
    // since this one read the file. A file that no longer parses is replaced.
    ConvAlgoTable merged;
    if (file_exists(path)) {
      try {
        merged = parse_conv_algo_file(read_file_bytes(path));
      } catch (const Error&) {
        merged.clear();
      }
    }
    for (const auto& [key, c] : mine) merged[key] = c;
    const std::string text = format_conv_algo_file(merged);
    write_file_atomically(path, [&](std::FILE* f) { fwrite_checked(f, text.data(), text.size()); });
    file_ = std::move(merged);
    ++stats_.file_writes;
  } catch (const std::exception& e) {
    warn_once_locked(path, "write",
                     "cannot write the cuDNN algorithm cache " + path + " (" + e.what() +
                         "); the choices are kept for this run only. Set STRATA_CUDNN_CACHE to a writable "
                         "file, or to off");
  }
}

ConvAlgoLookup ConvAlgoCache::find_or_measure(const std::string& path, const std::string& device,
                                              const std::string& problem,
                                              const std::function<ConvAlgoChoice()>& measure,
                                              const std::function<bool(const ConvAlgoChoice&)>& accept) {
  const std::pair<std::string, std::string> key{device, problem};
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto mem = memory_.find(key);
    if (mem != memory_.end() && accept(mem->second)) {
      ++stats_.memory_hits;
      return {mem->second, ConvAlgoOrigin::kMemory};
    }
    if (!path.empty()) {
      if (!loaded_ || loaded_path_ != path) load_locked(path);
      const auto stored = file_.find(key);
      if (stored != file_.end() && accept(stored->second)) {
        memory_[key] = stored->second;
        ++stats_.file_hits;
        return {stored->second, ConvAlgoOrigin::kFile};
      }
    }
  }
  // Measured without the lock: another device's thread need not wait for it.
  const ConvAlgoChoice choice = measure();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.measurements;
  memory_[key] = choice;
  if (!path.empty()) store_locked(path, device, problem, choice);
  return {choice, ConvAlgoOrigin::kMeasured};
}

ConvAlgoCacheStats ConvAlgoCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ConvAlgoCache::forget_for_testing() {
  std::lock_guard<std::mutex> lock(mu_);
  memory_.clear();
  measured_.clear();
  file_.clear();
  loaded_ = false;
  loaded_path_.clear();
  warned_.clear();
}

ConvAlgoCache& conv_algo_cache() {
  static ConvAlgoCache* cache = new ConvAlgoCache();  // never destroyed: layers may outlive static destruction
  return *cache;
}

}  // namespace strata::cuda
