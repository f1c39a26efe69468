// Typed errors for library code. main() catches strata::Error, prints what(),
// and exits non-zero; library code never calls exit() itself.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A configuration file (prototxt) is malformed or asks for something unknown.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Tensor or blob shapes do not fit together.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A file is missing, unreadable, truncated or corrupt.
class IoError : public Error {
 public:
  using Error::Error;
};

// Training produced inf/NaN (a loss, a gradient, a loaded weight).
class NumericError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Throws ErrorType with the message parts streamed together.
template <typename ErrorType = Error, typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw ErrorType(detail::concat(std::forward<Args>(args)...));
}

}  // namespace strata

// Internal invariant / argument check; the message says what was expected.
#define STRATA_CHECK(cond, ...)                                                \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ::strata::fail<::strata::Error>(__FILE__, ":", __LINE__, ": check '",    \
                                      #cond, "' failed: ", __VA_ARGS__);       \
    }                                                                          \
  } while (0)
