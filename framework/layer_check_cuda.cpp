// check_cpu_vs_cuda (framework/layer_check.h): one layer example on the CPU
// and on GPU 0, compared. Host code only: the GPU twin is driven through
// the Layer interface and Tensor copies, so this file compiles in every
// build and checks only where a CUDA build finds a GPU.
#include <cmath>
#include <memory>

#include "framework/layer_check.h"
#include "framework/layer_harness.h"
#include "framework/layer_registry.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

std::string cuda_check_unavailable(const std::string& type) {
#ifndef STRATA_WITH_CUDA
  (void)type;
  return "this build has no CUDA";
#else
  if (cuda::device_count() == 0) return "no GPU on this machine";
  std::string why;
  const std::unique_ptr<Layer> probe = build_any(type, &why);
  if (!probe) return "cannot build the layer: " + why;
  if (!probe->has_cuda()) return "the layer has no CUDA code";
  return "";
#endif
}

#ifndef STRATA_WITH_CUDA

std::vector<std::string> check_cpu_vs_cuda(const std::string& type, const LayerExample&, float, uint64_t, DType) {
  return {type + ": " + cuda_check_unavailable(type)};
}

#else

namespace {

using Problems = std::vector<std::string>;

Device gpu() { return Device::cuda(0); }

// Any float dtype, either side: widened to f32 on the host, or rounded to the tensor's dtype.
std::vector<float> download(const Tensor& t) { return widened(t); }
void upload(Tensor& t, const std::vector<float>& v) { store_rounded(t, v); }

std::vector<float> nans(int64_t n) { return std::vector<float>(static_cast<size_t>(n), std::nanf("")); }

void compare(Problems& out, const std::string& what, const std::vector<float>& cpu, const std::vector<float>& gpu_v,
             float tolerance) {
  compare_values(out, what, "CPU", cpu, "CUDA", gpu_v, tolerance);
}

}  // namespace

std::vector<std::string> check_cpu_vs_cuda(const std::string& type, const LayerExample& ex, float tolerance,
                                           uint64_t seed, DType storage) {
  if (const std::string why = cuda_check_unavailable(type); !why.empty()) return {why};
  Problems out;
  LayerHarness h = make_harness(type, ex, seed);
  if (storage != DType::kF32) {
    if (!h.layer->takes_storage(storage)) return {type + " does not take blobs stored in " + dtype_name(storage)};
    store_blobs_as(h, storage);  // the twin's blobs take the same dtypes
  }
  h.setup();
  CudaTwin g = make_cuda_twin(type, ex.config, ex.phase, seed, h, gpu());
  if (storage != DType::kF32 && !g.layer->takes_storage(storage)) {
    return {type + " on a GPU does not take blobs stored in " + dtype_name(storage) + " (the Net converts around it)"};
  }
  g.setup_from(h);

  h.forward();
  g.forward();
  for (size_t k = 0; k < h.top.size(); ++k) {
    if (h.top[k]->shape() != g.top[k]->shape()) {
      out.push_back("top " + std::to_string(k) + ": CPU " + shape_str(h.top[k]->shape()) + ", CUDA " +
                    shape_str(g.top[k]->shape()));
      return out;
    }
    compare(out, "top " + std::to_string(k), download(h.top[k]->data), download(g.top[k]->data), tolerance);
  }
  std::vector<LayerParam>& cp = h.layer->params();
  std::vector<LayerParam>& gp = g.layer->params();
  for (size_t p = 0; p < cp.size(); ++p) {
    compare(out, "param '" + cp[p].name + "' after forward", to_vector(cp[p].blob->data), download(gp[p].blob->data),
            tolerance);
  }

  // Backward: the same top diffs; bottom diffs start as NaN (they must be
  // overwritten), parameter diffs random (they must be accumulated).
  Rng rng(seed + 1);
  const std::vector<std::vector<float>> w = top_weights(h, rng);
  for (size_t k = 0; k < h.top.size(); ++k) {
    h.top[k]->diff.resize(h.top[k]->shape());
    upload(h.top[k]->diff, w[k]);
    g.top[k]->diff.resize(g.top[k]->shape());
    upload(g.top[k]->diff, w[k]);
  }
  const std::vector<bool> pd = gradient_targets(h, ex);
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    if (!pd[i]) continue;
    upload(h.bottom[i]->diff, nans(h.bottom[i]->numel()));
    upload(g.bottom[i]->diff, nans(h.bottom[i]->numel()));
  }
  for (size_t p = 0; p < cp.size(); ++p) {
    fill_gaussian(cp[p].blob->diff, rng);
    upload(gp[p].blob->diff, to_vector(cp[p].blob->diff));
  }
  // The values backward_reads() leaves out may be lent to other blobs before
  // backward (framework/net_plan.cpp): the CUDA backward finds them NaN and must
  // still give the CPU's gradients.
  const Layer::BackwardReads reads = g.layer->backward_reads();
  for (Blob* b : g.bottom) {
    if (!reads.bottoms) upload(b->data, nans(b->numel()));
  }
  for (Blob* t : g.top) {
    if (!reads.tops) upload(t->data, nans(t->numel()));
  }
  h.backward(pd);
  g.backward(pd);
  for (size_t i = 0; i < h.bottom.size(); ++i) {
    if (!pd[i]) continue;
    compare(out, "bottom " + std::to_string(i) + " gradient", download(h.bottom[i]->diff),
            download(g.bottom[i]->diff), tolerance);
  }
  for (size_t p = 0; p < cp.size(); ++p) {
    compare(out, "param '" + cp[p].name + "' gradient", to_vector(cp[p].blob->diff), download(gp[p].blob->diff),
            tolerance);
  }
  return out;
}

#endif  // STRATA_WITH_CUDA

}  // namespace strata
