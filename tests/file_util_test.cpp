#include "framework/io/file_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/error.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::error_of;

// A fresh directory per test, removed afterwards.
class FileUtilTest : public ::testing::Test {
 protected:
  std::vector<std::string> list() const { return dir_.list(); }
  std::string path(const std::string& name) const { return dir_.file(name); }
  static void write(const std::string& p, const std::string& text) {
    write_file_atomically(p, [&](std::FILE* f) { fwrite_checked(f, text.data(), text.size()); });
  }

  test::TempDir dir_{"strata_file_util"};
};

TEST_F(FileUtilTest, WritesNewFileAndLeavesNoTemp) {
  write(path("a.bin"), std::string("hello\0world", 11));
  EXPECT_EQ(read_file_bytes(path("a.bin")), std::string("hello\0world", 11));
  EXPECT_EQ(list(), std::vector<std::string>{"a.bin"});
}

TEST_F(FileUtilTest, ReplacesExistingFile) {
  write(path("a.txt"), "old contents that are longer");
  write(path("a.txt"), "new");
  EXPECT_EQ(read_file_bytes(path("a.txt")), "new");
  EXPECT_EQ(list().size(), 1u);
}

TEST_F(FileUtilTest, EmptyBodyMakesEmptyFile) {
  write_file_atomically(path("e"), [](std::FILE*) {});
  EXPECT_EQ(read_file_bytes(path("e")), "");
}

TEST_F(FileUtilTest, ThrowingBodyLeavesOldFileIntact) {
  write(path("w.bin"), "precious");
  EXPECT_THROW(write_file_atomically(path("w.bin"),
                                     [](std::FILE* f) {
                                       fwrite_checked(f, "partial", 7);
                                       throw std::runtime_error("writer gave up");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_file_bytes(path("w.bin")), "precious");
  EXPECT_EQ(list(), std::vector<std::string>{"w.bin"});
}

TEST_F(FileUtilTest, ThrowingBodyCreatesNothingWhenNoOldFile) {
  EXPECT_THROW(write_file_atomically(path("n"), [](std::FILE*) { throw 42; }), int);
  EXPECT_FALSE(file_exists(path("n")));
  EXPECT_TRUE(list().empty());
}

TEST_F(FileUtilTest, IoErrorFromBodyGainsPath) {
  const std::string msg = error_of<IoError>(
      [&] { write_file_atomically(path("x"), [](std::FILE*) { fail<IoError>("disk on fire"); }); });
  EXPECT_CONTAINS(msg, path("x"));
  EXPECT_CONTAINS(msg, "disk on fire");
  EXPECT_TRUE(list().empty());
}

TEST_F(FileUtilTest, MissingDirectoryNamesPathAndReason) {
  const std::string p = path("no/such/dir/f.bin");
  const std::string msg = error_of<IoError>([&] { write(p, "x"); });
  EXPECT_CONTAINS(msg, p);
  EXPECT_CONTAINS(msg, "No such file or directory");
}

TEST_F(FileUtilTest, RenameOverDirectoryFailsCleanly) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  write(path("d/inner"), "keep");
  const std::string msg = error_of<IoError>([&] { write(path("d"), "x"); });
  EXPECT_CONTAINS(msg, path("d"));
  EXPECT_CONTAINS(msg, "rename");
  EXPECT_EQ(read_file_bytes(path("d/inner")), "keep");
  EXPECT_EQ(list(), std::vector<std::string>{"d"});
  ::unlink(path("d/inner").c_str());
}

// A full disk is simulated with a file-size limit: writes past it fail with
// EFBIG (SIGXFSZ is ignored for the duration).
TEST_F(FileUtilTest, ShortWriteIsReportedAndOldFileKept) {
  write(path("big"), "old");
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct sigaction ignore = {}, old_action = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::vector<char> payload(1 << 20, 'z');
  const std::string msg = error_of<IoError>([&] {
    write_file_atomically(path("big"), [&](std::FILE* f) {
      fwrite_checked(f, payload.data(), payload.size());
      std::fflush(f);
    });
  });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::sigaction(SIGXFSZ, &old_action, nullptr);
  EXPECT_CONTAINS(msg, path("big"));
  EXPECT_CONTAINS(msg, "File too large");
  EXPECT_EQ(read_file_bytes(path("big")), "old");
  EXPECT_EQ(list(), std::vector<std::string>{"big"});
}

TEST_F(FileUtilTest, ReadMissingFileNamesPathAndReason) {
  const std::string msg = error_of<IoError>([&] { read_file_bytes(path("missing.bin")); });
  EXPECT_CONTAINS(msg, path("missing.bin"));
  EXPECT_CONTAINS(msg, "No such file or directory");
}

TEST_F(FileUtilTest, ReadDirectoryIsAnError) {
  const std::string msg = error_of<IoError>([&] { read_file_bytes(dir_.path()); });
  EXPECT_CONTAINS(msg, "is a directory");
}

TEST_F(FileUtilTest, ReadsLargeBinaryFile) {
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  write(path("large"), big);
  EXPECT_EQ(read_file_bytes(path("large")), big);
}

TEST_F(FileUtilTest, FileExists) {
  EXPECT_FALSE(file_exists(path("f")));
  write(path("f"), "");
  EXPECT_TRUE(file_exists(path("f")));
  EXPECT_TRUE(file_exists(dir_.path()));
}

TEST(PathTest, DirnameOf) {
  EXPECT_EQ(dirname_of("a/b/c.txt"), "a/b");
  EXPECT_EQ(dirname_of("c.txt"), "");
  EXPECT_EQ(dirname_of("/c.txt"), "/");
  EXPECT_EQ(dirname_of("/x/y"), "/x");
  EXPECT_EQ(dirname_of("a//b"), "a");
  EXPECT_EQ(dirname_of("a/b/"), "a/b");
  EXPECT_EQ(dirname_of(""), "");
}

TEST(PathTest, JoinPath) {
  EXPECT_EQ(join_path("models", "vgg.safetensors"), "models/vgg.safetensors");
  EXPECT_EQ(join_path("models/", "vgg.safetensors"), "models/vgg.safetensors");
  EXPECT_EQ(join_path("", "vgg.safetensors"), "vgg.safetensors");
  EXPECT_EQ(join_path("models", "/abs/w.bin"), "/abs/w.bin");
  EXPECT_EQ(join_path("/", "etc"), "/etc");
  EXPECT_EQ(join_path(dirname_of("cfg/net.prototxt"), "w.safetensors"), "cfg/w.safetensors");
  EXPECT_EQ(join_path(dirname_of("net.prototxt"), "w.safetensors"), "w.safetensors");
}

}  // namespace
}  // namespace strata
