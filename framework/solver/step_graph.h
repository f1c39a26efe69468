// StepGraph: a training step captured once as CUDA graphs and replayed.
//
// Once shapes are fixed, a step's device work is the same launches with the
// same arguments every step, and on a GPU the host's time to launch them
// (hundreds of kernels for a ViT) can exceed the GPU's time to run them.
// With the results read one step later (step_ledger.h) nothing inside a step
// waits for the device any more, so the work can be captured into a graph
// and replayed with one launch. Two graphs:
//   - the pass: the forward of every layer after the net's sources (its
//     leading layers without bottoms: data and Input), and the backward of
//     those layers; replayed iter_size times per step;
//   - the update: the gradient check, the step's decision, clipping and the
//     optimizer.
// What changes from step to step stays outside them and runs on the host
// before each replay: the sources' forward (a new batch, copied into the
// same device blobs), the step's record (StepLedger::begin zeroes the fixed
// record and writes the learning rate there; finish copies it out) and each
// layer's before_replay() (Dropout's seed, a loss's report of a bad label).
// Everything else the update needs is on the device already: the loss
// scale, Adam's t, the decision.
//
// The first step of a run (and of a resumed one) runs eagerly: it measures
// cuDNN's algorithms and fills the caching allocator, which a capture must
// not do. The second step is captured while it runs, and every later step
// replays. A captured step's allocations come from a private pool that the
// graph keeps (framework/cuda/allocator.h). The same weights as eager steps,
// bit for bit.
//
// When a step cannot be captured, the run says why once and goes on eagerly:
// see obstacle(). On the CPU there are no graphs: with `step_graph: ON` the
// same split step runs (sources, then the pass, then the update, the
// learning rate read from the record), which is what CI checks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace strata {

class Net;

#ifdef STRATA_WITH_CUDA
namespace cuda {
struct CapturedGraph;
}
#endif

class StepGraph {
 public:
  enum Part { kPass = 0, kUpdate = 1 };

  explicit StepGraph(Device device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // The net's sources: its leading layers without bottoms, run before each
  // replayed pass.
  static int sources(const Net& net);
  // Why the net's pass cannot be replayed, or "": the first layer after the
  // sources that does not declare Layer::replays_in_a_graph.
  static std::string net_obstacle(const Net& net);

  // Runs `work` as `part`: eagerly on the CPU and until capture is enabled;
  // on a GPU captured at its first call after enable() and replayed after
  // that. `before` runs on the host first whenever the part goes through a
  // graph (the layers' before_replay). A capture that fails throws
  // StepGraph::Failed after it has run `work` eagerly instead, so the step
  // is whole; the caller goes on eagerly.
  struct Failed {
    std::string why;
  };
  void run(Part part, const std::function<void()>& work, const std::function<void()>& before);

  // Capture from the next run() on (a GPU only; the CPU keeps running eagerly).
  void enable() { enabled_ = true; }
  bool enabled() const { return enabled_; }
  // Whether both parts are captured.
  bool captured() const;
  // The sources' top shapes, remembered at the first call after enable():
  // a replay with other shapes would read the wrong sizes. Says how they
  // changed since, or "". When the net's blobs were placed again since
  // (Net::plan_generation), drops the graphs instead: the step runs eagerly
  // and the next one is captured anew.
  std::string check_shapes(const Net& net);
  // Drops both graphs (their memory goes back to the cache) and disables capture.
  void reset();

 private:
  Device device_;
  bool enabled_ = false;
  bool remembered_ = false;
  std::vector<Shape> shapes_;
  uint64_t generation_ = 0;
#ifdef STRATA_WITH_CUDA
  cuda::CapturedGraph* graphs_[2] = {nullptr, nullptr};
#endif
};

}  // namespace strata
