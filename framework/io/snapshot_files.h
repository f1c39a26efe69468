// The files a run keeps under its snapshot prefix, kept safe: one run per
// prefix at a time, no staging debris left by a killed run, and no snapshot
// written over a file the run was started from.
#pragma once

#include <string>

namespace strata {

// Holds "<prefix>.lock" (flock) for its lifetime, so a second run with the
// same snapshot prefix (and so the same snapshots and log) is refused at
// start instead of interleaving its files with the first: ConfigError naming
// the prefix and the process that holds it. The lock goes away with the
// process, also when it is killed.
class SnapshotPrefixLock {
 public:
  explicit SnapshotPrefixLock(const std::string& prefix);
  ~SnapshotPrefixLock();
  SnapshotPrefixLock(const SnapshotPrefixLock&) = delete;
  SnapshotPrefixLock& operator=(const SnapshotPrefixLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

// Removes "<prefix>_iter_<N>...staged" files (and their ".tmp.<pid>"
// partials) that a run killed while writing a snapshot left behind; they
// are never complete snapshots. Returns how many were removed. Call with
// the prefix lock held.
int remove_snapshot_debris(const std::string& prefix);

// ConfigError when `input` (given with `flag`, e.g. "--weights") is a
// snapshot file of `prefix`: this run would write its own snapshots over it.
void check_not_a_snapshot_of(const std::string& input, const std::string& flag, const std::string& prefix);

}  // namespace strata
