// A seeded random number generator whose whole state can be saved and
// restored, so a resumed run draws exactly the numbers the unstopped run would.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

namespace strata {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) : seed_(seed) {}
  Rng(const Rng& o) { *this = o; }
  Rng& operator=(const Rng& o) {
    if (this == &o) return *this;
    seed_ = o.seed_;
    engine_ = o.engine_ ? std::make_unique<std::mt19937_64>(*o.engine_) : nullptr;
    has_spare_ = o.has_spare_;
    spare_ = o.spare_;
    return *this;
  }
  Rng(Rng&&) noexcept = default;
  Rng& operator=(Rng&&) noexcept = default;

  void seed(uint64_t s) {
    seed_ = s;
    engine_.reset();
    has_spare_ = false;
  }
  uint64_t next_u64() { return engine()(); }
  // Uniform in [0, 1) with 24 random bits, identical on every platform.
  float uniform() { return static_cast<float>(engine()() >> 40) * (1.0f / 16777216.0f); }
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
  // The engine (2.5 KB of state) is made, seeded, on first use: every layer
  // has an Rng, most never draw from it, and a net may have very many layers.
  std::mt19937_64& engine() {
    if (!engine_) engine_ = std::make_unique<std::mt19937_64>(seed_);
    return *engine_;
  }

  uint64_t seed_ = 1;
  std::unique_ptr<std::mt19937_64> engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace strata
