#include "framework/rng.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "framework/error.h"

namespace strata {

uint64_t Rng::uniform_int(uint64_t n) {
  STRATA_CHECK(n > 0, "uniform_int needs n > 0");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  std::mt19937_64& e = engine();
  do {
    x = e();
  } while (x >= limit);
  return x % n;
}

float Rng::gaussian(float mean, float stddev) {
  if (has_spare_) {
    has_spare_ = false;
    return mean + stddev * static_cast<float>(spare_);
  }
  std::mt19937_64& e = engine();
  double u1;
  do {
    u1 = static_cast<double>(e() >> 11) * (1.0 / 9007199254740992.0);
  } while (u1 <= 0.0);
  const double u2 = static_cast<double>(e() >> 11) * (1.0 / 9007199254740992.0);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return mean + stddev * static_cast<float>(r * std::cos(theta));
}

std::string Rng::save() const {
  std::ostringstream os;
  uint64_t spare_bits;
  std::memcpy(&spare_bits, &spare_, 8);
  os << "mt19937_64 " << (has_spare_ ? 1 : 0) << " " << spare_bits << " ";
  if (engine_) {
    os << *engine_;
  } else {
    os << std::mt19937_64(seed_);  // not drawn from yet: the state it would start from
  }
  return os.str();
}

void Rng::load(const std::string& state) {
  std::istringstream is(state);
  std::string tag;
  int has_spare = 0;
  uint64_t spare_bits = 0;
  auto engine = std::make_unique<std::mt19937_64>();
  is >> tag >> has_spare >> spare_bits >> *engine;
  if (!is || tag != "mt19937_64") fail<Error>("corrupt random number generator state in snapshot");
  engine_ = std::move(engine);
  has_spare_ = has_spare != 0;
  std::memcpy(&spare_, &spare_bits, 8);
}

}  // namespace strata
