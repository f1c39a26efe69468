#include "framework/memory_cap.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace strata {

namespace {
std::atomic<size_t> g_cap{0};
std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};
}  // namespace

void set_memory_cap(size_t bytes) { g_cap = bytes; }
size_t memory_cap() { return g_cap; }
size_t memory_in_use() { return g_in_use; }
size_t memory_peak() { return g_peak; }

void memory_cap_acquire(size_t bytes) {
  const size_t now = g_in_use.fetch_add(bytes) + bytes;
  const size_t cap = g_cap;
  if (cap > 0 && now > cap) {
    g_in_use.fetch_sub(bytes);
    fail<OutOfMemoryError>("out of memory under --max-memory: a tensor of ", format_bytes(bytes), " was asked for with ",
                format_bytes(now - bytes), " in use, over the cap of ", format_bytes(cap),
                "; split the model over more ranks with --pp (pipeline stages), or raise --max-memory");
  }
  size_t peak = g_peak;
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

void memory_cap_release(size_t bytes) { g_in_use.fetch_sub(bytes); }

namespace {

// The first whitespace-separated number in `path` (a cgroup file), or -1
// when the file is missing or says "max".
int64_t read_cgroup_number(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max") return -1;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
  if (!end || *end != '\0' || v > static_cast<unsigned long long>(INT64_MAX)) return -1;
  return static_cast<int64_t>(v);
}

// A named counter of a cgroup memory.stat file, or 0.
int64_t read_cgroup_stat(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  long long v = 0;
  while (f >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

}  // namespace

MachineMemory machine_memory_available() {
  MachineMemory m{SIZE_MAX, "unknown"};
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream is(line.substr(13));
    unsigned long long kib = 0;
    if (is >> kib) m = {static_cast<size_t>(kib) * 1024, "MemAvailable in /proc/meminfo"};
    break;
  }
  // Limits of 2^60 and above are how cgroup v1 writes "no limit".
  constexpr int64_t kNoLimit = int64_t{1} << 60;
  // Usage counts the page cache too; its inactive part is given back on demand.
  struct CgroupFiles {
    const char* limit;
    const char* usage;
    const char* stat;
    const char* inactive_file;
  };
  for (const CgroupFiles& c :
       {CgroupFiles{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
                    "inactive_file"},
        CgroupFiles{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                    "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"}}) {
    const int64_t limit = read_cgroup_number(c.limit);
    if (limit < 0 || limit >= kNoLimit) continue;
    int64_t usage = read_cgroup_number(c.usage);
    if (usage >= 0) usage -= std::min(usage, read_cgroup_stat(c.stat, c.inactive_file));
    const size_t room = static_cast<size_t>(usage >= 0 && usage < limit ? limit - usage : 0);
    if (room < m.available) m = {room, std::string("the cgroup memory limit (") + c.limit + ")"};
    break;
  }
  return m;
}

size_t parse_memory_size(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double mult = 1.0;
  if (end && *end) {
    const char u = *end;
    if (u == 'K' || u == 'k') mult = 1024.0;
    else if (u == 'M' || u == 'm') mult = 1024.0 * 1024.0;
    else if (u == 'G' || u == 'g') mult = 1024.0 * 1024.0 * 1024.0;
    else end = nullptr;
    if (end) ++end;
    if (end && (*end == 'B' || *end == 'b' || *end == 'i')) ++end;
    if (end && *end == 'B') ++end;
  }
  if (text.empty() || !end || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    fail<ConfigError>(where, ": expected a size in bytes such as 64M, 1.5G or 1048576, got '", text, "'");
  }
  return static_cast<size_t>(v * mult);
}

}  // namespace strata
