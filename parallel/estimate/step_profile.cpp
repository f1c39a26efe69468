#include "parallel/estimate/step_profile.h"

namespace strata::estimate {

double StepProfile::forward_seconds() const {
  double s = 0;
  for (const LayerProfile& l : layers) s += l.forward;
  return s;
}

double StepProfile::backward_seconds() const {
  double s = 0;
  for (const LayerProfile& l : layers) s += l.backward;
  return s;
}

double StepProfile::grad_bytes() const {
  double s = 0;
  for (const LayerProfile& l : layers) s += l.grad_bytes;
  return s;
}

}  // namespace strata::estimate
