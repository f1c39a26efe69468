#include "framework/solver/step_graph.h"

#include <exception>

#include "framework/layer.h"
#include "framework/net.h"

#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {

StepGraph::StepGraph(Device device) : device_(device) {}

StepGraph::~StepGraph() { reset(); }

int StepGraph::sources(const Net& net) {
  int k = 0;
  while (k < net.num_layers() && net.bottoms(k).empty()) ++k;
  return k;
}

std::string StepGraph::net_obstacle(const Net& net) {
  for (int i = sources(net); i < net.num_layers(); ++i) {
    const Layer& l = net.layer(i);
    if (!l.replays_in_a_graph()) {
      return "layer '" + l.name() + "' (" + l.type() +
             ") does not say that its device work is the same every step (Layer::replays_in_a_graph)";
    }
  }
  return "";
}

bool StepGraph::captured() const {
#ifdef STRATA_WITH_CUDA
  return graphs_[kPass] != nullptr && graphs_[kUpdate] != nullptr;
#else
  return false;
#endif
}

std::string StepGraph::check_shapes(const Net& net) {
  if (remembered_ && generation_ != net.plan_generation()) {
    // The blobs were placed again (a larger batch, a parameter frozen): the
    // graphs hold the old addresses. Drop them; the step runs eagerly and
    // the next one is captured anew.
    reset();
    return "";
  }
  std::vector<Shape> now;
  std::vector<int> owner;
  for (int i = 0; i < sources(net); ++i) {
    for (const Blob* b : net.tops(i)) {
      now.push_back(b->shape());
      owner.push_back(i);
    }
  }
  if (!remembered_) {
    shapes_ = now;
    generation_ = net.plan_generation();
    remembered_ = true;
    return "";
  }
  for (size_t k = 0; k < now.size(); ++k) {
    if (k >= shapes_.size() || shapes_[k] != now[k]) {
      return "the batch of layer '" + net.layer(owner[k]).name() + "' changed shape to " + shape_str(now[k]) +
             (k < shapes_.size() ? " from " + shape_str(shapes_[k]) : std::string()) +
             " after the step was captured";
    }
  }
  return "";
}

void StepGraph::reset() {
#ifdef STRATA_WITH_CUDA
  for (cuda::CapturedGraph*& g : graphs_) {
    cuda::destroy_graph(g);
    g = nullptr;
  }
#endif
  enabled_ = false;
  remembered_ = false;
  shapes_.clear();
}

void StepGraph::run(Part part, const std::function<void()>& work, const std::function<void()>& before) {
  if (!enabled_ || device_.is_cpu()) {
    work();
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda::CapturedGraph*& graph = graphs_[part];
  if (before) before();
  if (graph) {
    cuda::launch_graph(graph);
    return;
  }
  std::string why;
  cuda::begin_capture(device_.index);
  try {
    work();
    graph = cuda::end_capture(device_.index);
  } catch (const std::exception& e) {
    cuda::abandon_capture(device_.index);
    why = e.what();
  }
  if (graph) {
    cuda::launch_graph(graph);
    return;
  }
  // Nothing captured ran: run the work as an eager step would, and stop capturing.
  reset();
  work();
  throw Failed{why};
#else
  (void)part;
  (void)before;
  work();
#endif
}

}  // namespace strata
