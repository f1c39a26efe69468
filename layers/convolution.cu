// Convolution on the GPU through cuDNN: descriptors are set when the shape
// changes, and the algorithms for forward, backward-data and backward-filter
// are chosen once per (shape, math mode) by cuDNN's heuristics and cached.
// Workspace comes from the runtime's caching allocator. cuDNN handles groups
// itself (group count on the convolution descriptor).
#include <limits>
#include <map>
#include <tuple>

#include "framework/communicator.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/convolution.h"

namespace strata {

namespace {

// Algorithms needing more scratch than this are passed over.
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;
constexpr int kMaxAlgos = 16;

int to_int(int64_t v, const char* what) {
  STRATA_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "Convolution: ", what, " ", v,
               " is too large for cuDNN");
  return static_cast<int>(v);
}

// cuDNN lists candidates best first; take the first that ran the heuristic
// successfully, fits the workspace cap and, in strict FP32, is no tensor-op
// variant (those would round inputs to TF32; the descriptor's FMA math type
// rules them out as well).
template <typename Perf>
bool acceptable(const Perf& p) {
  if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspaceBytes) return false;
  return cuda::math_mode() != cuda::MathMode::kFP32 ||
         (p.mathType != CUDNN_TENSOR_OP_MATH && p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

template <typename Perf>
const Perf& pick(const Perf* perf, int n, const char* what) {
  for (int i = 0; i < n; ++i) {
    if (acceptable(perf[i])) return perf[i];
  }
  fail<Error>("Convolution: cuDNN offers no usable ", what, " algorithm for this shape (", n,
              " candidates, none within ", kMaxWorkspaceBytes >> 20, " MiB of workspace in math mode ",
              cuda::math_mode_name(cuda::math_mode()), ")");
}

}  // namespace

struct ConvolutionLayer::CudaState {
  struct Algos {
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t fwd_bytes, bwd_data_bytes, bwd_filter_bytes;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int>;  // N, H, W, math mode

  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Key current{-1, -1, -1, -1};  // shape the descriptors describe
  std::map<Key, Algos> cache;
  const Algos* algos = nullptr;

  CudaState() {
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    STRATA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    STRATA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  }
  ~CudaState() {
    // Destructors must not throw: errors here are ignored.
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;
};

// Sets the descriptors for the current shape (a no-op when unchanged) and
// finds the algorithms (once per shape and math mode).
void ConvolutionLayer::prepare_cudnn() {
  if (!cuda_) {
    cuda_ = std::make_shared<CudaState>();
    // Shape-independent parts.
    STRATA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(cuda_->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                  to_int(num_output_, "num_output"),
                                                  to_int(channels_ / group_, "channels per group"),
                                                  to_int(kernel_.h, "kernel_h"), to_int(kernel_.w, "kernel_w")));
    STRATA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        cuda_->conv, to_int(pad_.h, "pad_h"), to_int(pad_.w, "pad_w"), to_int(stride_.h, "stride_h"),
        to_int(stride_.w, "stride_w"), to_int(dilation_.h, "dilation_h"), to_int(dilation_.w, "dilation_w"),
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    STRATA_CUDNN_CHECK(cudnnSetConvolutionGroupCount(cuda_->conv, to_int(group_, "group")));
    STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(cuda_->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                  to_int(num_output_, "num_output"), 1, 1));
  }
  CudaState& st = *cuda_;
  const CudaState::Key key{num_, height_, width_, static_cast<int>(cuda::math_mode())};
  if (key == st.current) return;
  STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(st.conv, cuda::cudnn_math_type()));
  STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(st.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(num_, "batch"),
                                                to_int(channels_, "channels"), to_int(height_, "height"),
                                                to_int(width_, "width")));
  STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(st.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(num_, "batch"),
                                                to_int(num_output_, "num_output"), to_int(out_h_, "out_h"),
                                                to_int(out_w_, "out_w")));
  st.current = key;
  auto found = st.cache.find(key);
  if (found == st.cache.end()) {
    cudnnHandle_t h = cuda::cudnn_handle();
    CudaState::Algos a{};
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMaxAlgos];
    STRATA_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, st.x, st.w, st.conv, st.y, kMaxAlgos, &n, fwd));
    const cudnnConvolutionFwdAlgoPerf_t& f = pick(fwd, n, "forward");
    a.fwd = f.algo;
    a.fwd_bytes = f.memory;
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[kMaxAlgos];
    STRATA_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(h, st.w, st.y, st.conv, st.x, kMaxAlgos, &n, bwd_data));
    const cudnnConvolutionBwdDataAlgoPerf_t& d = pick(bwd_data, n, "backward-data");
    a.bwd_data = d.algo;
    a.bwd_data_bytes = d.memory;
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[kMaxAlgos];
    STRATA_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, st.x, st.y, st.conv, st.w, kMaxAlgos, &n, bwd_filter));
    const cudnnConvolutionBwdFilterAlgoPerf_t& g = pick(bwd_filter, n, "backward-filter");
    a.bwd_filter = g.algo;
    a.bwd_filter_bytes = g.memory;
    // The heuristic's memory estimate can differ from what the call needs: ask.
    STRATA_CUDNN_CHECK(
        cudnnGetConvolutionForwardWorkspaceSize(h, st.x, st.w, st.conv, st.y, a.fwd, &a.fwd_bytes));
    STRATA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, st.w, st.y, st.conv, st.x, a.bwd_data,
                                                                    &a.bwd_data_bytes));
    STRATA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, st.x, st.y, st.conv, st.w, a.bwd_filter,
                                                                      &a.bwd_filter_bytes));
    found = st.cache.emplace(key, a).first;
  }
  st.algos = &found->second;
}

void ConvolutionLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (tp_.active() && top[0] != &local_top_) {
    // split: OUTPUT_CHANNELS, as on the CPU: this rank's channels into
    // local_top_ (the code below, whose descriptors have this rank's
    // num_output_, with local_top_ as its top), then every rank's channels
    // allgathered on the device into the whole top.
    cuda::ensure_on_device(local_top_.data, {num_, num_output_, out_h_, out_w_}, DType::kF32, device());
    forward_cuda(bottom, {&local_top_});
    allgather_blocks(tp_, local_top_.data, top[0]->shape(), 1, gathered_, top[0]->data);
    return;
  }
  if (num_ == 0) return;  // cuDNN rejects empty tensors; the top is empty too
  prepare_cudnn();
  CudaState& st = *cuda_;
  cudnnHandle_t h = cuda::cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  void* ws = st.algos->fwd_bytes > 0 ? cuda::workspace(st.algos->fwd_bytes) : nullptr;
  STRATA_CUDNN_CHECK(cudnnConvolutionForward(h, &one, st.x, bottom[0]->data.device_data<float>(), st.w,
                                             param(0).data.device_data<float>(), st.conv, st.algos->fwd, ws,
                                             st.algos->fwd_bytes, &zero, st.y, top[0]->data.device_data<float>()));
  if (bias_ == Bias::kYes) {
    STRATA_CUDNN_CHECK(cudnnAddTensor(h, &one, st.bias, param(1).data.device_data<float>(), &one, st.y,
                                      top[0]->data.device_data<float>()));
  }
}

void ConvolutionLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                     const BlobVec& bottom) {
  if (tp_.active() && top[0] != &local_top_) {
    // split: this rank's channels of the top gradient, the local backward,
    // then the input gradient summed over the group (every rank's channels
    // depend on all input channels).
    cuda::ensure_on_device(local_top_.diff, {num_, num_output_, out_h_, out_w_}, DType::kF32, device());
    copy_block_out(top[0]->diff, 1, tp_.size, tp_.rank, local_top_.diff);
    backward_cuda({&local_top_}, propagate_down, bottom);
    if (propagate_down[0]) tp_.comm->allreduce(bottom[0]->diff, ReduceOp::kSum);
    return;
  }
  if (num_ == 0) return;  // nothing to add to the parameter gradients, no input gradient
  prepare_cudnn();
  CudaState& st = *cuda_;
  cudnnHandle_t h = cuda::cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  const float* dy = top[0]->diff.device_data<float>();
  // Parameter gradients accumulate (beta = 1); the input gradient is overwritten.
  if (bias_ == Bias::kYes) {
    STRATA_CUDNN_CHECK(
        cudnnConvolutionBackwardBias(h, &one, st.y, dy, &one, st.bias, param(1).diff.device_data<float>()));
  }
  void* ws = st.algos->bwd_filter_bytes > 0 ? cuda::workspace(st.algos->bwd_filter_bytes) : nullptr;
  STRATA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, st.x, bottom[0]->data.device_data<float>(), st.y, dy,
                                                    st.conv, st.algos->bwd_filter, ws, st.algos->bwd_filter_bytes, &one,
                                                    st.w, param(0).diff.device_data<float>()));
  if (propagate_down[0]) {
    ws = st.algos->bwd_data_bytes > 0 ? cuda::workspace(st.algos->bwd_data_bytes) : nullptr;
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, st.w, param(0).data.device_data<float>(), st.y, dy,
                                                    st.conv, st.algos->bwd_data, ws, st.algos->bwd_data_bytes, &zero,
                                                    st.x, bottom[0]->diff.device_data<float>()));
  }
}

}  // namespace strata
