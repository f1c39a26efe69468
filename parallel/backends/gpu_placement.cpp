#include "parallel/backends/gpu_placement.h"

#include <sstream>

#include "framework/error.h"

namespace strata::parallel {

std::string duplicate_gpu_problem(const std::vector<GpuPlacement>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t q = 0; q < r; ++q) {
      if (ranks[q].host != ranks[r].host || ranks[q].gpu != ranks[r].gpu) continue;
      int on_host = 0;
      for (const GpuPlacement& p : ranks) on_host += p.host == ranks[r].host ? 1 : 0;
      std::ostringstream o;
      o << "ranks " << q << " and " << r << " are both on GPU cuda:" << ranks[r].device << " (" << ranks[r].gpu
        << ") of host " << ranks[r].host << ", and NCCL cannot put two ranks of one communicator on one GPU; "
        << "that host runs " << on_host << " rank" << (on_host == 1 ? "" : "s") << " and has " << ranks[r].host_gpus
        << " GPU" << (ranks[r].host_gpus == 1 ? "" : "s") << ". Start at most " << ranks[r].host_gpus
        << " rank" << (ranks[r].host_gpus == 1 ? "" : "s") << " per host (strata launch --nproc "
        << ranks[r].host_gpus << "), or let ranks share GPUs through host memory with --dp-backend tcp";
      return o.str();
    }
  }
  return "";
}

std::string encode_gpu_placement(const GpuPlacement& p) {
  return p.host + "|" + p.gpu + "|" + std::to_string(p.device) + "|" + std::to_string(p.host_gpus);
}

GpuPlacement decode_gpu_placement(const std::string& text) {
  GpuPlacement p;
  std::istringstream in(text);
  std::string device, gpus;
  if (!std::getline(in, p.host, '|') || !std::getline(in, p.gpu, '|') || !std::getline(in, device, '|') ||
      !std::getline(in, gpus)) {
    fail<Error>("malformed GPU placement in the store: '", text, "'");
  }
  try {
    p.device = std::stoi(device);
    p.host_gpus = std::stoi(gpus);
  } catch (const std::exception&) {
    fail<Error>("malformed GPU placement in the store: '", text, "'");
  }
  return p;
}

}  // namespace strata::parallel
