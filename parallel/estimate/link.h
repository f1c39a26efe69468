// The alpha-beta (Hockney) model of a link: sending S bytes takes
// alpha + S / bandwidth seconds, alpha the per-message latency. Every cost in
// parallel/estimate/ is built on it.
//
// Presets are the links users ask about (docs/estimate.md lists the numbers
// and where they come from). Bandwidths are the line rate per direction; the
// latencies are typical one-way small-message times of the transport usually
// run over them (TCP for Ethernet, verbs for InfiniBand, NCCL for NVLink).
#pragma once

#include <string>
#include <vector>

namespace strata::estimate {

struct Link {
  std::string name;
  double bandwidth = 0.0;  // bytes per second, per direction
  double latency = 0.0;    // alpha: seconds per message
  std::string source;      // where the numbers come from, shown to the user
};

// Seconds to send `bytes` in one message: alpha + bytes / bandwidth.
double transfer_seconds(const Link& link, double bytes);

// The preset names, in the order the help lists them.
std::vector<std::string> link_names();

// A preset by name ("10gbe", "ib-hdr", ...). "shm" needs the memcpy bandwidth
// of this machine (measure_memcpy_bandwidth): pass it as shm_memcpy_bandwidth.
// An unknown name is a ConfigError that lists the presets and the nearest one.
Link link_preset(const std::string& name, double shm_memcpy_bandwidth = 0.0);

// Bytes per second of one large memcpy on this machine (best of a few
// repetitions of a 64 MiB copy; about 0.1 s).
double measure_memcpy_bandwidth();

}  // namespace strata::estimate
