#include "framework/io/snapshot_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
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

}  // namespace

SnapshotPrefixLock::SnapshotPrefixLock(const std::string& prefix) : path_(prefix + ".lock") {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail<IoError>("cannot create the run lock '", path_, "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {0};
    [[maybe_unused]] ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      fail<ConfigError>("another run is writing snapshots and the log with the prefix '", prefix, "' (",
                        holder[0] ? std::string("process ") + holder : std::string("see ") + path_,
                        "); wait for it to finish, or give this run another snapshot_prefix");
    }
    fail<IoError>("cannot lock '", path_, "': ", std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] ssize_t n = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
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

void check_not_a_snapshot_of(const std::string& input, const std::string& flag, const std::string& prefix) {
  std::error_code ec;
  const fs::path in = fs::weakly_canonical(fs::absolute(input), ec);
  if (ec) return;
  const auto [dir, stem] = iter_stem(prefix);
  const fs::path own_dir = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec || in.parent_path() != own_dir) return;
  const std::string name = in.filename().string();
  if (name.rfind(stem, 0) != 0) return;
  if (!is_iter_number_then(name, stem.size(), ".safetensors") &&
      !is_iter_number_then(name, stem.size(), ".solverstate.safetensors")) {
    return;
  }
  fail<ConfigError>(flag, " ", input, " is a snapshot of this solver's own snapshot_prefix '", prefix,
                    "': this run would write its snapshots over it. Set another snapshot_prefix in the solver "
                    "(or copy the file elsewhere first)");
}

}  // namespace strata
