#include "parallel/estimate/link.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"

namespace strata::estimate {

namespace {

constexpr double kGbit = 1e9 / 8.0;  // bytes per second in one Gb/s
constexpr double kGByte = 1e9;
constexpr double kMicro = 1e-6;

std::vector<Link> presets() {
  return {
      {"10gbe", 10 * kGbit, 30 * kMicro, "10 Gb/s Ethernet line rate; 30 us TCP latency"},
      {"25gbe", 25 * kGbit, 25 * kMicro, "25 Gb/s Ethernet line rate; 25 us TCP latency"},
      {"25gbe-rdma", 25 * kGbit, 3 * kMicro, "25 Gb/s Ethernet line rate with RDMA (RoCE); 3 us verbs latency"},
      {"40gbe", 40 * kGbit, 25 * kMicro, "40 Gb/s Ethernet line rate; 25 us TCP latency"},
      {"50gbe", 50 * kGbit, 25 * kMicro, "50 Gb/s Ethernet line rate; 25 us TCP latency"},
      {"100gbe", 100 * kGbit, 10 * kMicro, "100 Gb/s Ethernet line rate; 10 us TCP latency"},
      {"ib-hdr", 200 * kGbit, 2 * kMicro, "InfiniBand HDR 4x: 200 Gb/s; 2 us verbs latency"},
      {"ib-ndr", 400 * kGbit, 2 * kMicro, "InfiniBand NDR 4x: 400 Gb/s; 2 us verbs latency"},
      // NVLink 4 on an H100 SXM: 18 links x 25 GB/s = 450 GB/s each way
      // (NVIDIA H100 datasheet: 900 GB/s bidirectional). In an HGX/DGX H100
      // the links go through NVSwitch, so every GPU pair gets the full rate:
      // "nvswitch" is the same link seen from the topology's side.
      {"nvlink", 450 * kGByte, 3 * kMicro, "NVLink 4 (H100 SXM): 450 GB/s per direction; 3 us NCCL latency"},
      {"nvswitch", 450 * kGByte, 3 * kMicro,
       "NVSwitch (HGX H100): 450 GB/s per GPU per direction to any peer; 3 us NCCL latency"},
      // Links inside the servers of older systems, for --node-link: NVLink 3
      // on an A100 SXM (12 links x 25 GB/s each way; NVIDIA: 600 GB/s both
      // ways), NVLink 1 on a P100 SXM2 (4 links x 20 GB/s each way; NVIDIA:
      // 160 GB/s both ways), and PCIe 3.0 x16 (15.75 GB/s each way).
      {"nvlink-a100", 300 * kGByte, 3 * kMicro, "NVLink 3 (A100 SXM): 300 GB/s per direction; 3 us NCCL latency"},
      {"nvlink-p100", 80 * kGByte, 3 * kMicro, "NVLink 1 (P100 SXM2): 80 GB/s per direction; 3 us NCCL latency"},
      {"pcie3", 15.75 * kGByte, 5 * kMicro, "PCIe 3.0 x16: 15.75 GB/s per direction line rate; 5 us latency"},
  };
}

}  // namespace

double transfer_seconds(const Link& link, double bytes) { return link.latency + bytes / link.bandwidth; }

std::vector<std::string> link_names() {
  std::vector<std::string> names;
  for (const Link& l : presets()) names.push_back(l.name);
  names.push_back("shm");
  return names;
}

Link link_preset(const std::string& name, double shm_memcpy_bandwidth) {
  if (name == "shm") {
    STRATA_CHECK(shm_memcpy_bandwidth > 0, "the shm link needs this machine's memcpy bandwidth");
    // strata's shared-memory transport copies every message twice (into the
    // segment, out of it): half the memcpy rate. 5 us covers the hand-off
    // between processes (a futex wake).
    return {"shm", shm_memcpy_bandwidth / 2, 5 * kMicro,
            "this machine's memcpy bandwidth (measured now) / 2 for the copy in and out of the segment; 5 us "
            "hand-off"};
  }
  for (const Link& l : presets()) {
    if (l.name == name) return l;
  }
  std::string known;
  for (const std::string& n : link_names()) known += (known.empty() ? "" : ", ") + n;
  const std::string near = nearest_key(name, link_names());
  fail<ConfigError>("unknown link '", name, "'", near.empty() ? "" : "; did you mean '" + near + "'?",
                    " (known links: ", known, ")");
}

double measure_memcpy_bandwidth() {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // first touch outside the timing
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  // Keep the copy observable so it is not optimised away.
  volatile char sink = dst[bytes / 2];
  (void)sink;
  return static_cast<double>(bytes) / best;
}

}  // namespace strata::estimate
