#include "framework/io/snapshot_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "framework/error.h"
#include "framework/io/file_util.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// "<dir>/<base>_iter_" split into the folder and the file-name start.
std::pair<fs::path, std::string> iter_stem(const std::string& prefix) {
  const fs::path p(prefix);
  return {p.has_parent_path() ? p.parent_path() : fs::path("."), p.filename().string() + "_iter_"};
}

bool is_iter_number_then(const std::string& name, size_t from, const std::string& rest) {
  size_t i = from;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  return i > from && name.compare(i, std::string::npos, rest) == 0;
}

// Whether a JSON-lines training log ends with its run's "finish" event (the
// last line; only the file's tail is read, logs can be long).
bool log_has_finish(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff tail = std::min<std::streamoff>(size, 4096);
  std::string text(static_cast<size_t>(tail), '\0');
  in.seekg(size - tail);
  in.read(text.data(), tail);
  return text.find("\"event\":\"finish\"") != std::string::npos;
}

}  // namespace

SnapshotPrefixLock::SnapshotPrefixLock(const std::string& prefix) {
  if (hold(prefix)) return;
  fail<ConfigError>("another run is writing snapshots and the log with the prefix '", prefix, "' (",
                    holder_.empty() ? std::string("see ") + path_ : std::string("process ") + holder_,
                    "); wait for it to finish, or give this run another snapshot_prefix");
}

std::unique_ptr<SnapshotPrefixLock> SnapshotPrefixLock::try_hold(const std::string& prefix) {
  std::unique_ptr<SnapshotPrefixLock> lock(new SnapshotPrefixLock());
  if (!lock->hold(prefix)) return nullptr;
  return lock;
}

bool SnapshotPrefixLock::hold(const std::string& prefix) {
  path_ = prefix + ".lock";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail<IoError>("cannot create the run lock '", path_, "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {0};
    [[maybe_unused]] ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      holder_ = holder;
      return false;
    }
    fail<IoError>("cannot lock '", path_, "': ", std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] ssize_t n = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
  return true;
}

SnapshotPrefixLock::~SnapshotPrefixLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // still held: a run waiting on the same prefix re-creates it
  ::close(fd_);
}

int remove_snapshot_debris(const std::string& prefix) {
  const auto [dir, stem] = iter_stem(prefix);
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(stem, 0) != 0 || name.find(".safetensors.staged") == std::string::npos) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

namespace {

// "<prefix>_log.jsonl" (the default) -> "<branch>_log.jsonl"; another log
// path takes the branch's suffix before its extension.
std::string branch_log(const std::string& log, const std::string& prefix, const std::string& branch) {
  if (log == prefix + "_log.jsonl") return branch + "_log.jsonl";
  const std::string suffix = branch.substr(prefix.size());
  const size_t slash = log.rfind('/');
  const size_t dot = log.rfind('.');
  const bool has_ext = dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
  return has_ext ? log.substr(0, dot) + suffix + log.substr(dot) : log + suffix;
}

bool holds_a_file(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec) && !ec;
}

}  // namespace

ResumeBranch branch_for_resume(const std::string& prefix, const std::string& log, int64_t from_iter) {
  ResumeBranch branch;
  const EarlierRun given = find_earlier_run(prefix, log);
  if (given.newest_iter <= from_iter) return branch;
  branch.newer_iter = given.newest_iter;
  const std::string base = prefix + "_from" + std::to_string(from_iter);
  for (int n = 1;; ++n) {
    const std::string candidate = n == 1 ? base : base + "_" + std::to_string(n);
    const std::string candidate_log = branch_log(log, prefix, candidate);
    // An earlier branch's files (its log too, finished or not) stay its own.
    if (!find_earlier_run(candidate, candidate_log).snapshot_files.empty() || holds_a_file(candidate_log)) continue;
    std::unique_ptr<SnapshotPrefixLock> lock = SnapshotPrefixLock::try_hold(candidate);
    if (!lock) continue;  // a branch that another run writes now
    branch.prefix = candidate;
    branch.log = candidate_log;
    branch.lock = std::move(lock);
    return branch;
  }
}

std::string ResumeBranch::note(const std::string& given_prefix, int64_t from_iter) const {
  return "'" + given_prefix + "' holds snapshots up to iteration " + std::to_string(newer_iter) +
         ", newer than this resume from iteration " + std::to_string(from_iter) +
         ": this run writes its snapshots as '" + prefix + "_iter_<N>' and its log to '" + log +
         "' (the newer snapshots stay as they are)";
}

bool is_snapshot_of(const std::string& input, const std::string& prefix) {
  std::error_code ec;
  const fs::path in = fs::weakly_canonical(fs::absolute(input), ec);
  if (ec) return false;
  const auto [dir, stem] = iter_stem(prefix);
  const fs::path own_dir = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec || in.parent_path() != own_dir) return false;
  const std::string name = in.filename().string();
  if (name.rfind(stem, 0) != 0) return false;
  return is_iter_number_then(name, stem.size(), ".safetensors") ||
         is_iter_number_then(name, stem.size(), ".solverstate.safetensors");
}

EarlierRun find_earlier_run(const std::string& prefix, const std::string& log_path) {
  const auto [dir, stem] = iter_stem(prefix);
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(stem, 0) != 0) continue;
    if (!is_iter_number_then(name, stem.size(), ".safetensors") &&
        !is_iter_number_then(name, stem.size(), ".solverstate.safetensors")) {
      continue;
    }
    // A folder in a snapshot's place is no snapshot (writing there fails, naming it).
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    found.emplace_back(std::strtoll(name.c_str() + stem.size(), nullptr, 10), (dir / name).string());
  }
  std::sort(found.begin(), found.end());
  EarlierRun run;
  for (const auto& [iter, path] : found) {
    run.snapshot_files.push_back(path);
    run.newest_iter = iter;
  }
  // Worth resuming: the state file of the newest iteration, when it is there.
  const std::string newest_state = (dir / (stem + std::to_string(run.newest_iter) + ".solverstate.safetensors")).string();
  for (const std::string& path : run.snapshot_files) {
    if (path == newest_state) run.newest_state = path;
  }
  if (fs::file_size(log_path, ec) > 0 && !ec && (!run.snapshot_files.empty() || log_has_finish(log_path))) {
    run.log = log_path;
  }
  return run;
}

int remove_earlier_run(const EarlierRun& run) {
  int removed = 0;
  std::vector<std::string> order = run.snapshot_files;
  std::stable_partition(order.begin(), order.end(), [](const std::string& p) {
    return p.find(".solverstate.safetensors") != std::string::npos;
  });
  if (!run.log.empty()) order.push_back(run.log);
  for (const std::string& path : order) {
    std::error_code ec;
    if (fs::remove(path, ec)) {
      ++removed;
    } else if (ec) {
      fail<IoError>("cannot remove '", path, "' of the earlier run (--overwrite): ", ec.message());
    }
  }
  return removed;
}

void check_no_earlier_run(const EarlierRun& run, const std::string& prefix) {
  if (run.empty()) return;
  std::string what;
  if (!run.snapshot_files.empty()) {
    what = std::to_string(run.snapshot_files.size()) + " snapshot file" + (run.snapshot_files.size() == 1 ? "" : "s") +
           " (up to iteration " + std::to_string(run.newest_iter) + ")";
  }
  if (!run.log.empty()) what += (what.empty() ? "" : " and ") + std::string("the log ") + run.log;
  const std::string resume =
      run.newest_state.empty() ? std::string() : "continue it with --snapshot " + run.newest_state + ", ";
  fail<ConfigError>("an earlier run with the snapshot_prefix '", prefix, "' left ", what,
                    "; this run would replace them. To keep them, ", resume,
                    "set another snapshot_prefix in the solver file, or move them away; "
                    "to replace them, pass --overwrite");
}

void check_not_a_snapshot_of(const std::string& input, const std::string& flag, const std::string& prefix) {
  if (!is_snapshot_of(input, prefix)) return;
  fail<ConfigError>(flag, " ", input, " is a snapshot of this solver's own snapshot_prefix '", prefix,
                    "': this run would write its snapshots over it. Set another snapshot_prefix in the solver "
                    "(or copy the file elsewhere first)");
}

}  // namespace strata
