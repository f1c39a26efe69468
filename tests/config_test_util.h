// Helpers shared by config_test.cpp and config_errors_test.cpp.
#pragma once

#include <exception>
#include <string>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/error.h"

namespace strata {
namespace config_test {

inline ConfigNode parse(const std::string& text) { return parse_config_text(text, "t.prototxt"); }

// The message of the ErrorType thrown by f, or a marker that fails any HasSubstr check.
template <typename ErrorType = ConfigError, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const ErrorType& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline std::string parse_error(const std::string& text) {
  return message_of([&] { parse(text); });
}

#define EXPECT_CONTAINS(haystack, needle)                                                  \
  do {                                                                                     \
    const std::string h_ = (haystack);                                                     \
    EXPECT_NE(h_.find(needle), std::string::npos) << "message: " << h_ << "\nmissing: " << (needle); \
  } while (0)

// Structural equality, ignoring locations.
inline void expect_same_tree(const ConfigNode& a, const ConfigNode& b, const std::string& path = "<root>") {
  ASSERT_EQ(a.key(), b.key()) << path;
  ASSERT_EQ(a.is_block(), b.is_block()) << path;
  if (!a.is_block()) {
    EXPECT_EQ(a.text(), b.text()) << path;
    EXPECT_EQ(a.is_quoted(), b.is_quoted()) << path;
    return;
  }
  ASSERT_EQ(a.children().size(), b.children().size()) << path;
  for (size_t i = 0; i < a.children().size(); ++i) {
    expect_same_tree(a.children()[i], b.children()[i], path + "/" + a.children()[i].key());
  }
}

}  // namespace config_test
}  // namespace strata
