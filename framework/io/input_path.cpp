#include "framework/io/input_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "framework/io/file_util.h"

namespace strata {

namespace {

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

std::string working_directory() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string(".");
}

InputPath find_input_path(const std::string& path, const std::string& beside_dir, LookFirst first) {
  InputPath out;
  if (path.empty() || path[0] == '/') {
    out.path = path;
    out.found = FoundIn::kAbsolute;
    return out;
  }
  const std::string beside = join_path(beside_dir, path);
  const bool in_working = file_exists(path);
  const bool in_beside = file_exists(beside);
  const bool both_differ = in_working && in_beside && beside != path && !same_file(path, beside);
  // One file seen from both places is named as strata always named it (beside the file).
  if (in_working && (!in_beside || (first == LookFirst::kWorkingDirectory && both_differ))) {
    out.path = path;
    out.found = FoundIn::kWorkingDirectory;
    if (both_differ) out.shadowed = beside;
    return out;
  }
  out.path = beside;
  out.found = in_beside ? FoundIn::kBesideFile : FoundIn::kNowhere;
  if (both_differ) out.shadowed = path;
  return out;
}

std::string input_path_places(const std::string& path, const std::string& beside_dir) {
  const std::string cwd = working_directory();
  std::string s = "'" + join_path(cwd, path) + "' (the working directory, as Caffe looks)";
  const std::string beside = join_path(beside_dir, path);
  if (beside != path) s += " and '" + beside + "' (beside the file that names it)";
  return s;
}

}  // namespace strata
