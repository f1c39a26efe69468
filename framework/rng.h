// A seeded random number generator whose whole state can be saved and
// restored, so a resumed run draws exactly the numbers the unstopped run would.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace strata {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) : engine_(seed) {}

  void seed(uint64_t s) {
    engine_.seed(s);
    has_spare_ = false;
  }
  uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1) with 24 random bits, identical on every platform.
  float uniform() { return static_cast<float>(engine_() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n); unbiased (rejection sampling).
  uint64_t uniform_int(uint64_t n);
  // Normal deviate (Box-Muller, computed here so results do not depend on the
  // standard library's distribution implementation).
  float gaussian(float mean, float stddev);

  // Text form of the complete state (engine and cached normal deviate).
  std::string save() const;
  // Throws Error when `state` is not something save() wrote.
  void load(const std::string& state);

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace strata
