// One rank per GPU within an NCCL communicator: NCCL refuses two ranks of
// one communicator on one GPU ("Duplicate GPU detected") with a message that
// does not say what to do. Before NCCL is asked, every rank publishes which
// GPU it holds (its host as NCCL sees it, NCCL_HOSTID when set, and the GPU's
// PCI bus id), and a clash is refused naming the ranks, the GPU, the count of
// ranks and GPUs on that host, and what to run instead.
#pragma once

#include <string>
#include <vector>

namespace strata::parallel {

struct GpuPlacement {
  std::string host;    // NCCL_HOSTID when set, else the host name
  std::string gpu;     // the GPU's PCI bus id ("0000:1a:00.0")
  int device = 0;      // its CUDA index in that rank's process
  int host_gpus = 0;   // GPUs that rank's process sees
};

// "" when every rank holds a GPU of its own; else the message of the first
// clash (the lowest rank that shares a GPU with a lower one).
std::string duplicate_gpu_problem(const std::vector<GpuPlacement>& ranks);

// "host|gpu|device|host_gpus" and back, for the store.
std::string encode_gpu_placement(const GpuPlacement& p);
GpuPlacement decode_gpu_placement(const std::string& text);

}  // namespace strata::parallel
