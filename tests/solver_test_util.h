// Helpers shared by solver_config_test.cpp and solver_test.cpp.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config.h"
#include "framework/solver_config.h"
#include "tests/test_util.h"

namespace strata {
namespace solver_test {

using test::error_of;
using test::write_text;

// A temp folder named strata_solver_test_*.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("strata_solver_test") {}
};

inline SolverConfig parse_solver(const std::string& text, const std::string& source = "/work/exp/solver.prototxt") {
  return parse_solver_config(parse_config_text(text, source), source);
}

}  // namespace solver_test
}  // namespace strata
