// Where a resumed run writes: its own prefix, or a branch beside it that
// leaves the prefix's newer snapshots alone (framework/io/snapshot_files.h).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "framework/io/snapshot_files.h"
#include "framework/error.h"
#include "tests/test_util.h"

namespace strata {
namespace {

void touch(const std::string& path, const std::string& text = "x") { std::ofstream(path) << text; }

void snapshot_pair(const std::string& prefix, int iter) {
  touch(prefix + "_iter_" + std::to_string(iter) + ".safetensors");
  touch(prefix + "_iter_" + std::to_string(iter) + ".solverstate.safetensors");
}

TEST(SnapshotFiles, ResumeFromTheNewestKeepsThePrefix) {
  test::TempDir dir;
  const std::string prefix = dir.file("snap");
  snapshot_pair(prefix, 4);
  snapshot_pair(prefix, 8);
  const ResumeBranch branch = branch_for_resume(prefix, prefix + "_log.jsonl", 8);
  EXPECT_FALSE(branch.taken());
  EXPECT_EQ(branch.lock, nullptr);
  EXPECT_FALSE(branch_for_resume(dir.file("empty"), dir.file("empty_log.jsonl"), 0).taken());
}

TEST(SnapshotFiles, AFolderInASnapshotsPlaceIsNoSnapshot) {
  test::TempDir dir;
  const std::string prefix = dir.file("snap");
  snapshot_pair(prefix, 10);
  std::filesystem::create_directories(prefix + "_iter_15.safetensors/occupied");
  EXPECT_EQ(find_earlier_run(prefix, prefix + "_log.jsonl").newest_iter, 10);
  EXPECT_FALSE(branch_for_resume(prefix, prefix + "_log.jsonl", 10).taken());
}

TEST(SnapshotFiles, ResumeFromAnOlderSnapshotBranches) {
  test::TempDir dir;
  const std::string prefix = dir.file("snap");
  snapshot_pair(prefix, 4);
  snapshot_pair(prefix, 8);
  const ResumeBranch branch = branch_for_resume(prefix, prefix + "_log.jsonl", 4);
  ASSERT_TRUE(branch.taken());
  EXPECT_EQ(branch.prefix, prefix + "_from4");
  EXPECT_EQ(branch.log, prefix + "_from4_log.jsonl");
  EXPECT_EQ(branch.newer_iter, 8);
  EXPECT_NE(branch.lock, nullptr);
  const std::string note = branch.note(prefix, 4);
  EXPECT_NE(note.find("up to iteration 8, newer than this resume from iteration 4"), std::string::npos) << note;
  EXPECT_NE(note.find("'" + prefix + "_from4_iter_<N>'"), std::string::npos) << note;
}

TEST(SnapshotFiles, ABranchWithFilesOrARunIsPassedOver) {
  test::TempDir dir;
  const std::string prefix = dir.file("snap");
  snapshot_pair(prefix, 4);
  snapshot_pair(prefix, 8);
  snapshot_pair(prefix + "_from4", 8);      // an earlier branch's snapshots
  touch(prefix + "_from4_2_log.jsonl");      // one that wrote only its log
  SnapshotPrefixLock running(prefix + "_from4_3");  // one that runs now
  const ResumeBranch branch = branch_for_resume(prefix, prefix + "_log.jsonl", 4);
  EXPECT_EQ(branch.prefix, prefix + "_from4_4");
  EXPECT_EQ(branch.log, prefix + "_from4_4_log.jsonl");
  // Held: a run choosing now passes it over too.
  EXPECT_EQ(branch_for_resume(prefix, prefix + "_log.jsonl", 4).prefix, prefix + "_from4_5");
}

TEST(SnapshotFiles, ALogSetInTheSolverBranchesBesideItself) {
  test::TempDir dir;
  const std::string prefix = dir.file("snap");
  snapshot_pair(prefix, 10);
  snapshot_pair(prefix, 20);
  EXPECT_EQ(branch_for_resume(prefix, dir.file("train.jsonl"), 10).log, dir.file("train_from10.jsonl"));
  EXPECT_EQ(branch_for_resume(prefix, dir.file("logs.d/train"), 10).log, dir.file("logs.d/train_from10"));
}

TEST(SnapshotFiles, TryHoldGivesWayToAHolder) {
  test::TempDir dir;
  SnapshotPrefixLock first(dir.file("snap"));
  EXPECT_EQ(SnapshotPrefixLock::try_hold(dir.file("snap")), nullptr);
  const std::string msg = test::error_of<ConfigError>([&] { SnapshotPrefixLock second(dir.file("snap")); });
  EXPECT_NE(msg.find("another run is writing snapshots"), std::string::npos) << msg;
  EXPECT_NE(SnapshotPrefixLock::try_hold(dir.file("other")), nullptr);
}

}  // namespace
}  // namespace strata
