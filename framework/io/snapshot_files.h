// The files a run keeps under its snapshot prefix, kept safe: one run per
// prefix at a time, no staging debris left by a killed run, and no snapshot
// written over a file the run was started from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// Holds "<prefix>.lock" (flock) for its lifetime, so a second run with the
// same snapshot prefix (and so the same snapshots and log) is refused at
// start instead of interleaving its files with the first: ConfigError naming
// the prefix and the process that holds it. The lock goes away with the
// process, also when it is killed.
class SnapshotPrefixLock {
 public:
  explicit SnapshotPrefixLock(const std::string& prefix);
  // nullptr when another process holds the prefix (IoError as above when
  // the lock file cannot be made at all).
  static std::unique_ptr<SnapshotPrefixLock> try_hold(const std::string& prefix);
  ~SnapshotPrefixLock();
  SnapshotPrefixLock(const SnapshotPrefixLock&) = delete;
  SnapshotPrefixLock& operator=(const SnapshotPrefixLock&) = delete;

 private:
  SnapshotPrefixLock() = default;
  // False (with holder_ set) when another process holds it.
  bool hold(const std::string& prefix);
  std::string path_;
  std::string holder_;  // the holding process's id, as its lock file says
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

// The files an earlier run left under a snapshot prefix: its snapshot files
// ("<prefix>_iter_<N>.safetensors" and ".solverstate.safetensors") and its
// log. A new run would replace them, so it is refused unless the user says
// so (--overwrite). A log alone counts only when its run finished: the log
// of a run that failed at once (a wrong label, a missing file) and wrote no
// snapshot would otherwise block every corrected attempt.
struct EarlierRun {
  std::vector<std::string> snapshot_files;  // sorted by iteration
  int64_t newest_iter = -1;
  std::string newest_state;  // its .solverstate.safetensors ("" if only weights files)
  std::string log;           // "" when there is none, it is empty, or (without snapshots) its run never finished
  bool empty() const { return snapshot_files.empty() && log.empty(); }
};
EarlierRun find_earlier_run(const std::string& prefix, const std::string& log_path);

// Deletes what find_earlier_run found (snapshot states first, as they point
// at their weights files; then the weights, then the log). Returns the count.
int remove_earlier_run(const EarlierRun& run);

// Where a run resumed from the snapshot of iteration `from_iter` writes.
// When its snapshot_prefix holds snapshots of later iterations (the run went
// on past that snapshot, or another run used the prefix), writing there would
// replace them as the resumed run reaches their iterations, so it branches:
// "<prefix>_from<N>", or "<prefix>_from<N>_2", "_3", ... when an earlier
// branch left files there (or runs now). The log follows: the default
// "<prefix>_log.jsonl" becomes "<branch>_log.jsonl", a log set in the solver
// takes the same suffix before its extension ("train.jsonl" ->
// "train_from20.jsonl").
struct ResumeBranch {
  std::string prefix;  // the branch ("" when the resumed run keeps the prefix)
  std::string log;
  int64_t newer_iter = -1;  // the newest snapshot under the prefix the run was given
  std::unique_ptr<SnapshotPrefixLock> lock;  // the branch's, held
  bool taken() const { return !prefix.empty(); }
  // The console line that says so, naming both prefixes.
  std::string note(const std::string& given_prefix, int64_t from_iter) const;
};
// Call with the given prefix's lock held.
ResumeBranch branch_for_resume(const std::string& prefix, const std::string& log, int64_t from_iter);

// Whether `input` is one of the snapshot files of `prefix`.
bool is_snapshot_of(const std::string& input, const std::string& prefix);

// ConfigError naming what an earlier run left under `prefix` (see
// EarlierRun) and the three ways on: continue it, replace it, or use
// another prefix. Does nothing when there is nothing.
void check_no_earlier_run(const EarlierRun& run, const std::string& prefix);

}  // namespace strata
