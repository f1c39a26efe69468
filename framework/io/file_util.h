// Small filesystem helpers shared by the weight/array/log writers and readers.
// Every failure is an IoError whose message names the path and the reason.
#pragma once

#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace strata {

// Replaces `path` with whatever `write_body` writes, all or nothing: the body
// writes to "<path>.tmp.<pid>" in the same directory, which is flushed, fsynced
// and renamed over `path` (then the directory is fsynced so the rename itself
// survives a crash). If the body throws, or any write/flush/sync/rename fails,
// the temp file is removed and `path` is left exactly as it was. Exceptions from
// the body propagate unchanged, except IoError, which gains the path as prefix.
// Bodies should write with fwrite_checked() so short writes are caught early.
// The temp name is per process, so two threads must not write the same path at once.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::FILE*)>& write_body);

// fwrite that throws IoError ("write failed: <strerror>") on a short write.
void fwrite_checked(std::FILE* f, const void* data, size_t nbytes);

// An existing regular file opened read-only (O_CLOEXEC); the caller closes fd.
// Throws IoError ("cannot open/stat/read '<path>': <reason>") for missing,
// unreadable or non-regular files, with nothing left open.
struct OpenedFile {
  int fd;
  size_t size;  // at open time
};
OpenedFile open_regular_file(const std::string& path);

// The whole file as bytes. Throws IoError for missing, unreadable or non-regular files.
std::string read_file_bytes(const std::string& path);

// True if something (file, directory, ...) exists at `path`.
bool file_exists(const std::string& path);

// Like Python's os.path.dirname: "a/b/c" -> "a/b", "c" -> "", "/c" -> "/".
std::string dirname_of(const std::string& path);

// The checks a command makes on a file it is about to write (`flag`, e.g.
// "--out"), before any work, so that no run ends by failing to write or by
// replacing what it should not. ConfigError, naming the flag and the path:
// - `path` is the same file as one of `inputs` (flag, path pairs: the
//   command's own inputs, the model's weights): never, even with `overwrite`;
// - `path` exists and is not a regular file, or exists, is not
//   `earlier_output(path)` (an output of an earlier run of the same command,
//   which may be replaced) and `overwrite` is false;
// - the folder it goes into does not exist or cannot be written.
struct NamedInput {
  std::string flag;
  std::string path;
};
enum class Overwrite { kNo, kYes };
void check_output_path(const std::string& flag, const std::string& path, const std::vector<NamedInput>& inputs,
                       Overwrite overwrite, const std::function<bool(const std::string&)>& earlier_output);

// Resolves `rel` against `dir` (like os.path.join for two parts): an absolute
// `rel` is returned as is, and an empty `dir` yields `rel`.
std::string join_path(const std::string& dir, const std::string& rel);

}  // namespace strata
