#include "parallel/slowdown.h"

#include <cmath>
#include <cstdlib>
#include <thread>

#include "framework/error.h"

namespace strata::parallel {

Slowdown::Slowdown(Solver& solver, double factor) : solver_(solver), factor_(factor) { solver_.attach(*this); }

Slowdown::~Slowdown() { solver_.detach(*this); }

void Slowdown::before_update(Net&) {
  if (factor_ > 1.0) std::this_thread::sleep_for((Clock::now() - step_start_) * (factor_ - 1.0));
}

double parse_slowdown(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 1.0 || v > 1000.0) {
    fail<ConfigError>(where, ": expected a slowdown factor from 1 to 1000 (2 = half speed), got '", text, "'");
  }
  return v;
}

}  // namespace strata::parallel
