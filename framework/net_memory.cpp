// Net: what its tensors take. The report of a built net (parameters,
// gradients, optimizer state, buffers, activations, layer scratch), the
// check of a memory plan against the cap and the machine before anything is
// allocated, the storages a net holds, and the trace of what each layer of
// the first passes takes (STRATA_MEMORY_TRACE=1).
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>

#include "framework/byte_size.h"
#include "framework/error.h"
#include "framework/memory_cap.h"
#include "framework/memory_plan.h"
#include "framework/net.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

std::string MemoryReport::str() const {
  std::ostringstream os;
  os << "parameters " << format_bytes(param_bytes) << ", gradients " << format_bytes(grad_bytes);
  if (optimizer_bytes) os << ", optimizer state " << format_bytes(optimizer_bytes);
  os << ", buffers " << format_bytes(buffer_bytes) << ", activations " << format_bytes(activation_bytes);
  if (layer_bytes) os << ", layer data " << format_bytes(layer_bytes);
  if (workspace_bytes) os << ", workspace " << format_bytes(workspace_bytes);
  os << ", total " << format_bytes(total());
  return os.str();
}

void Net::check_memory_plan(const MemoryPlan& plan) const {
  const MemoryPlan::Totals t = plan.totals();
  // What is still to be taken; what was taken during setup is in use already.
  const size_t later = t.host_deferred + t.device_deferred + t.estimated;
  const size_t cap = memory_cap();
  std::string over, remedy;
  if (cap > 0 && memory_in_use() + later > cap) {
    over = "with " + format_bytes(memory_in_use()) + " in use, over the cap of " + format_bytes(cap);
    remedy = "split the model over more ranks with --pp (pipeline stages), reduce batch_size, or raise --max-memory";
  } else {
    const size_t host_later = t.host_deferred + (on_cuda() ? 0 : t.estimated);
    const MachineMemory m = machine_memory_available();
    if (host_later <= m.available) return;
    over = "more than the " + format_bytes(m.available) + " this machine has available (" + m.source + ")";
    remedy = "reduce batch_size (or the size of the layers named below), or run on a machine with more memory";
  }
  std::vector<int> order(t.by_owner.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return t.by_owner[a] > t.by_owner[b]; });
  std::ostringstream os;
  os << "net '" << name_ << "' (" << phase_name(options_.phase) << ") needs " << format_bytes(t.total())
     << " of tensor memory, " << over << "; " << remedy << ".";
  for (size_t k = 0; k < order.size() && k < 3; ++k) {
    const int i = order[k];
    if (t.by_owner[i] == 0) break;
    os << (k == 0 ? " The layer that needs the most is " : (k == 1 ? "; then " : ", ")) << layer_where(i)
       << ": " << format_bytes(t.by_owner[i]);
    if (k == 0) {
      for (size_t b = 0; b < tops_[i].size(); ++b) {
        os << (b == 0 ? " (top " : ", top ") << "'" << top_names_[i][b] << "' " << shape_str(tops_[i][b]->shape());
      }
      if (!tops_[i].empty()) os << ")";
    }
  }
  os << ". Of the total, " << format_bytes(t.host_deferred + t.device_deferred)
     << " is blobs and layer scratch still to allocate";
  if (t.estimated) os << ", " << format_bytes(t.estimated) << " optimizer state";
  os << ", " << format_bytes(t.taken) << " parameters and data already loaded";
  throw OutOfMemoryError(os.str());
}

std::set<const void*> Net::blob_and_param_storages() const {
  std::set<const void*> ids;
  for (const auto& p : params_) ids.insert({p.blob->data.storage_id(), p.blob->diff.storage_id()});
  for (const auto& kv : blobs_) ids.insert({kv.second->data.storage_id(), kv.second->diff.storage_id()});
  ids.erase(nullptr);
  return ids;
}

MemoryReport Net::memory_report() const { return strata::memory_report({this}); }

MemoryReport memory_report(const std::vector<const Net*>& nets) {
  MemoryReport r;
  std::set<const void*> seen;
  for (const Net* net : nets) {
    if (!net) continue;
    for (const auto& p : net->params_) {
      if (!seen.insert(p.blob->data.storage_id()).second) continue;  // shared with an earlier net
      seen.insert(p.blob->diff.storage_id());
      const int id = static_cast<int>(&p - net->params_.data());
      if (p.learnable == Learnable::kYes) {
        r.param_bytes += p.blob->data.capacity_bytes();
        // A gradient handed to sharded data parallel is its keeper's to report.
        if (!net->gradient_handed_over(id)) r.grad_bytes += p.blob->diff.capacity_bytes();
        if (p.lr_mult != 0.0f) {
          r.optimizer_bytes += static_cast<size_t>(net->options_.optimizer_slots) * p.blob->data.nbytes();
        }
      } else {
        r.buffer_bytes += p.blob->data.capacity_bytes() + p.blob->diff.capacity_bytes();
      }
    }
  }
  for (const Net* net : nets) {
    if (!net) continue;
    // A net that runs no backward never takes its blobs' gradients.
    const bool backward = net->phase() == Phase::kTrain || net->force_backward_;
    for (const auto& kv : net->blobs_) {
      for (const Tensor* t : {&kv.second->data, &kv.second->diff}) {
        if (t == &kv.second->diff && !backward && !t->holds_memory()) continue;
        if (t->storage_id() && seen.insert(t->storage_id()).second) r.activation_bytes += t->storage_bytes();
      }
    }
    r.layer_bytes += net->layer_bytes_;
    for (const auto& scratch : net->scratches_) {
      if (scratch->storage_id() && seen.insert(scratch->storage_id()).second) r.workspace_bytes += scratch->bytes();
    }
    // kSeparate's f32 copies of blobs stored in bf16/f16 (net_storage.cpp).
    if (net->cast_buffer_.storage_id() && seen.insert(net->cast_buffer_.storage_id()).second) {
      r.workspace_bytes += net->cast_buffer_.storage_bytes();
    }
  }
  return r;
}

void Net::plan_scratch() {
  if (options_.blob_memory == BlobMemory::kSeparate) {
    if (scratches_.size() != layers_.size()) {
      scratches_.clear();
      for (auto& l : layers_) {
        scratches_.push_back(std::make_shared<SharedScratch>(options_.device));
        l->share_scratch(scratches_.back());
      }
    }
    for (size_t i = 0; i < layers_.size(); ++i) scratches_[i]->reserve(layers_[i]->scratch_bytes());
    return;
  }
  // By lifetime each call's scratch has its place in the arena
  // (plan_blob_memory); the shared buffer only grows for a call that needs
  // more than its place, which a reshape outside the net's can cause.
  if (scratches_.empty()) {
    scratches_.push_back(std::make_shared<SharedScratch>(options_.device));
    scratches_[0]->set_poison(options_.blob_memory == BlobMemory::kByLifetimeChecked);
    for (auto& l : layers_) l->share_scratch(scratches_[0]);
  }
}

std::set<const void*> Net::scratch_storages() const {
  std::set<const void*> ids;
  for (const auto& scratch : scratches_) ids.insert(scratch->storage_id());
  ids.erase(nullptr);
  return ids;
}

namespace {

std::string signed_bytes(size_t now, size_t before) {
  return now >= before ? "+" + format_bytes(now - before) : "-" + format_bytes(before - now);
}

}  // namespace

// One line when the tensors in use (every device, framework/memory_cap.h) or
// the GPU's allocated bytes (which also hold the shared workspace and
// scratch taken outside tensors) changed since the last line.
void Net::trace_memory(const char* pass, int layer) {
  const size_t tensors = memory_in_use();
  size_t device = 0, device_peak = 0;
#ifdef STRATA_WITH_CUDA
  if (on_cuda()) {
    const cuda::AllocatorStats st = cuda::memory_stats(options_.device.index);
    device = st.allocated_bytes;
    device_peak = st.peak_allocated_bytes;
  }
#endif
  if (layer != -1 && tensors == traced_tensors_ && device == traced_device_) return;  // -1: setup, always
  std::ostringstream os;
  os << "memory trace, net '" << name_ << "', " << pass;
  if (layer >= 0) os << " " << layers_[static_cast<size_t>(layer)]->name();
  os << ": tensors " << format_bytes(tensors) << " (" << signed_bytes(tensors, traced_tensors_) << ", peak "
     << format_bytes(memory_peak()) << ")";
  if (on_cuda()) {
    os << ", GPU allocated " << format_bytes(device) << " (" << signed_bytes(device, traced_device_) << ", peak "
       << format_bytes(device_peak) << ")";
  }
  std::fprintf(stderr, "%s\n", os.str().c_str());
  traced_tensors_ = tensors;
  traced_device_ = device;
}

void Net::trace_update() {
  if (memory_trace_updates_ <= 0) return;
  --memory_trace_updates_;
  trace_memory("update", -2);
}

void Net::end_memory_trace_pass() {
  if (memory_trace_passes_ > 0) --memory_trace_passes_;
}

}  // namespace strata
