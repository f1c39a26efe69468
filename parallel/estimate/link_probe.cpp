#include "parallel/estimate/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "framework/error.h"
#include "framework/tensor.h"

namespace strata::estimate {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSmallTrips = 50;
constexpr int kLargeTrips = 5;
constexpr int64_t kLargeBytes = int64_t{16} << 20;

// Round trips of `t` between rank 0 and `peer`; seconds of each (rank 0), empty elsewhere.
std::vector<double> round_trips(Communicator& comm, int peer, Tensor& t, int trips) {
  std::vector<double> out;
  for (int k = 0; k < trips; ++k) {
    if (comm.rank() == 0) {
      const Clock::time_point start = Clock::now();
      comm.send(t, peer, 1);
      comm.recv(t, peer, 2);
      out.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    } else if (comm.rank() == peer) {
      comm.recv(t, 0, 1);
      comm.send(t, 0, 2);
    }
  }
  return out;
}

}  // namespace

Link probe_link(Communicator& comm) {
  const int n = comm.world_size();
  if (n < 2) {
    fail<ConfigError>("--link measured probes the ranks of a launched job: run it as `strata launch --nproc 2 -- "
                      "strata estimate ... --link measured` (across nodes: --nnodes 2)");
  }
  const int peer = n - 1;
  Tensor small(Shape{8}, DType::kU8), large(Shape{kLargeBytes}, DType::kU8);
  round_trips(comm, peer, small, 5);  // connections and caches warm
  std::vector<double> s = round_trips(comm, peer, small, kSmallTrips);
  round_trips(comm, peer, large, 1);
  std::vector<double> l = round_trips(comm, peer, large, kLargeTrips);
  comm.barrier();
  if (comm.rank() != 0) return Link{};
  std::sort(s.begin(), s.end());
  const double latency = s[s.size() / 2] / 2;
  const double one_way = *std::min_element(l.begin(), l.end()) / 2;
  Link link;
  link.name = "measured";
  link.latency = latency;
  link.bandwidth = static_cast<double>(kLargeBytes) / std::max(1e-9, one_way - latency);
  char src[200];
  std::snprintf(src, sizeof src, "ping-pong between rank 0 and rank %d over the %s backend: median of %d 8-byte and "
                "best of %d 16 MiB round trips", peer, comm.backend_name().c_str(), kSmallTrips, kLargeTrips);
  link.source = src;
  return link;
}

}  // namespace strata::estimate
