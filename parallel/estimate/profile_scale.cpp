#include "parallel/estimate/profile_scale.h"

#include <sstream>

#include "framework/error.h"

namespace strata::estimate {

StepProfile scale_to_throughput(const StepProfile& profile, const DeviceThroughput& device, std::string* how) {
  if (!(device.samples_per_second > 0)) {
    fail<ConfigError>("--device-throughput must be > 0 samples per second, got ", device.samples_per_second);
  }
  const int batch = device.batch > 0 ? device.batch : profile.batch;
  STRATA_CHECK(profile.batch > 0, "the profile's batch must be positive, got ", profile.batch);
  const double per_sample = static_cast<double>(batch) / profile.batch;
  const double step = batch / device.samples_per_second;
  StepProfile p = profile;
  p.batch = batch;
  double flops = 0.0;
  for (const LayerProfile& l : profile.layers) flops += l.flops + l.backward_flops;
  const double measured = profile.compute_seconds();
  std::ostringstream note;
  if (flops > 0) {
    for (LayerProfile& l : p.layers) {
      l.forward = step * l.flops / flops;
      l.backward = step * l.backward_flops / flops;
    }
    note << "split over the layers by their FLOPs, backward = 2 x forward (an assumption)";
  } else if (measured > 0) {
    for (LayerProfile& l : p.layers) {
      l.forward *= step / measured;
      l.backward *= step / measured;
    }
    note << "split over the layers as the times measured here are (an assumption)";
  } else {
    fail<ConfigError>("--device-throughput: the net '", profile.net,
                      "' has neither counted FLOPs nor measured times to split the step by; give --model or --solver "
                      "(FLOPs are counted), or a --times file with times");
  }
  for (LayerProfile& l : p.layers) {
    l.top_bytes *= per_sample;
    l.bottom_bytes *= per_sample;
    l.activation_bytes *= per_sample;  // per batch, like the tops; parameters do not scale
    l.flops *= per_sample;
    l.backward_flops *= per_sample;
  }
  if (how) {
    std::ostringstream s;
    s << "step " << step * 1e3 << " ms = batch " << batch << " / " << device.samples_per_second
      << " samples/s on one device, " << note.str();
    *how = s.str();
  }
  return p;
}

}  // namespace strata::estimate
