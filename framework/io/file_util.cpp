#include "framework/io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "framework/error.h"

namespace strata {

namespace {

// Closes `f` and deletes `tmp`, keeping the caller's errno for its message.
void discard_temp(std::FILE* f, const std::string& tmp) {
  const int saved = errno;
  if (f) std::fclose(f);
  std::remove(tmp.c_str());
  errno = saved;
}

// Makes a completed rename durable. Some filesystems cannot fsync a directory
// (EINVAL); the data itself is already synced then, so that is not an error.
void fsync_directory(const std::string& path) {
  std::string dir = dirname_of(path);
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    fail<IoError>(path, ": written, but cannot open directory '", dir,
                  "' to sync it: ", std::strerror(errno));
  }
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int saved = errno;
    ::close(fd);
    fail<IoError>(path, ": written, but syncing directory '", dir,
                  "' failed: ", std::strerror(saved));
  }
  ::close(fd);
}

}  // namespace

void fwrite_checked(std::FILE* f, const void* data, size_t nbytes) {
  if (nbytes == 0) return;
  errno = 0;
  if (std::fwrite(data, 1, nbytes, f) != nbytes) {
    fail<IoError>("write failed: ", errno ? std::strerror(errno) : "short write");
  }
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::FILE*)>& write_body) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    fail<IoError>(path, ": cannot create temporary file '", tmp, "': ", std::strerror(errno));
  }
  try {
    write_body(f);
  } catch (const IoError& e) {
    discard_temp(f, tmp);
    fail<IoError>(path, ": ", e.what());
  } catch (...) {
    discard_temp(f, tmp);
    throw;
  }
  // A body that used plain fwrite may have ignored an error; the stream remembers.
  if (std::ferror(f)) {
    discard_temp(f, tmp);
    fail<IoError>(path, ": write to '", tmp, "' failed");
  }
  if (std::fflush(f) != 0) {
    discard_temp(f, tmp);
    fail<IoError>(path, ": flushing '", tmp, "' failed: ", std::strerror(errno));
  }
  if (::fsync(::fileno(f)) != 0) {
    discard_temp(f, tmp);
    fail<IoError>(path, ": fsync of '", tmp, "' failed: ", std::strerror(errno));
  }
  // fclose can report a deferred write error (e.g. on network filesystems).
  const int close_rc = std::fclose(f);
  if (close_rc != 0) {
    discard_temp(nullptr, tmp);
    fail<IoError>(path, ": closing '", tmp, "' failed: ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    discard_temp(nullptr, tmp);
    fail<IoError>(path, ": cannot rename '", tmp, "' over it: ", std::strerror(errno));
  }
  fsync_directory(path);
}

OpenedFile open_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail<IoError>("cannot open '", path, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int saved = errno;
    ::close(fd);
    fail<IoError>("cannot stat '", path, "': ", std::strerror(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail<IoError>("cannot read '", path,
                  "': ", S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
  }
  return {fd, static_cast<size_t>(st.st_size)};
}

std::string read_file_bytes(const std::string& path) {
  const OpenedFile file = open_regular_file(path);
  const int fd = file.fd;
  std::string bytes(file.size, '\0');
  size_t done = 0;
  // Read until EOF rather than trusting st_size, in case the file grows underneath.
  char extra[65536];
  for (;;) {
    const bool in_place = done < bytes.size();
    const ssize_t n =
        in_place ? ::read(fd, &bytes[done], bytes.size() - done) : ::read(fd, extra, sizeof(extra));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      fail<IoError>("cannot read '", path, "': ", std::strerror(saved));
    }
    if (n == 0) break;
    if (!in_place) bytes.append(extra, static_cast<size_t>(n));
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string dirname_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  std::string head = path.substr(0, slash + 1);
  // Keep a root made only of slashes ("/", "//"); strip trailing ones otherwise.
  if (head.find_first_not_of('/') == std::string::npos) return head;
  while (!head.empty() && head.back() == '/') head.pop_back();
  return head;
}

std::string join_path(const std::string& dir, const std::string& rel) {
  if (!rel.empty() && rel[0] == '/') return rel;
  if (dir.empty()) return rel;
  if (dir.back() == '/') return dir + rel;
  return dir + "/" + rel;
}

void check_output_path(const std::string& flag, const std::string& path, const std::vector<NamedInput>& inputs,
                       Overwrite overwrite, const std::function<bool(const std::string&)>& earlier_output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (exists) {
    for (const NamedInput& in : inputs) {
      std::error_code same_ec;
      if (!in.path.empty() && fs::equivalent(path, in.path, same_ec)) {
        fail<ConfigError>(flag, " '", path, "' is the same file as ", in.flag, " '", in.path,
                          "': writing it would destroy the input; choose another path (--overwrite does not "
                          "allow this)");
      }
    }
    if (!fs::is_regular_file(path, ec)) {
      fail<ConfigError>(flag, " '", path, "' exists and is not a regular file; choose a file path");
    }
    if (overwrite == Overwrite::kNo && !(earlier_output && earlier_output(path))) {
      fail<ConfigError>(flag, " '", path, "' exists and is not an output of an earlier run of this command; pass "
                        "--overwrite to replace it, or choose another path");
    }
  }
  const std::string dir = dirname_of(path).empty() ? "." : dirname_of(path);
  if (!fs::is_directory(dir, ec)) {
    fail<ConfigError>(flag, " '", path, "': the folder '", dir, "' does not exist; create it first");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    fail<ConfigError>(flag, " '", path, "': the folder '", dir, "' is not writable (", std::strerror(errno), ")");
  }
}

}  // namespace strata
