// Convolution on the GPU through cuDNN: descriptors are set when the shape
// changes, and the algorithms for forward, backward-data and backward-filter
// are chosen once per (shape, math mode) by framework/cuda/conv_algos.h
// (timed by default, remembered process-wide and on disk) and kept here.
// They are chosen when the shape is set (reshape), before the Net plans its
// memory, so the workspace they take is scratch (Layer::scratch_bytes) that
// the plan places by step in the net's arena, where the bytes are free at
// that layer's call. cuDNN handles groups itself (group count on the
// convolution descriptor). Blobs stored in bf16 or f16 get descriptors of
// that type (f32 compute), NHWC blobs NHWC descriptors; both take a copy of
// the weight in the blobs' dtype and layout (KRSC for NHWC) that the forward
// makes and keeps for the backward (forward_stored_cuda, backward_stored_cuda).
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "framework/communicator.h"
#include "framework/cuda/conv_algos.h"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "framework/error.h"
#include "framework/layout.h"
#include "framework/scratch.h"
#include "layers/convolution/convolution.h"
#include "layers/epilogue.h"

namespace strata {

namespace {

int to_int(int64_t v, const char* what) {
  STRATA_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "Convolution: ", what, " ", v,
               " is too large for cuDNN");
  return static_cast<int>(v);
}

// `bytes` of this call's scratch (Layer::scratch: the plan's place for the
// call) as cuDNN's workspace; null for none.
void* workspace_in(const Tensor& block, size_t bytes) {
  if (bytes == 0) return nullptr;
  ScratchCarver carver(block);
  Tensor ws = carver.take({static_cast<int64_t>(bytes)}, DType::kU8);
  return ws.device_data<uint8_t>();  // the block outlives the call
}

// cuDNN's data type for blobs stored in `dtype`.
cudnnDataType_t cudnn_data_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDNN_DATA_FLOAT;
    case DType::kBF16: return CUDNN_DATA_BFLOAT16;
    case DType::kF16: return CUDNN_DATA_HALF;
    default: break;
  }
  fail<Error>("Convolution: blobs stored in ", dtype_name(dtype), " (f32, bf16 and f16 only)");
}

}  // namespace

struct ConvolutionLayer::CudaState {
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int>;  // N, H, W, math mode, storage dtype, layout

  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One per direction, same geometry: each in its algorithm's math type.
  cudnnConvolutionDescriptor_t conv = nullptr, conv_bwd_data = nullptr, conv_bwd_filter = nullptr;
  Key current{-1, -1, -1, -1, -1, -1};  // shape the descriptors describe
  std::map<Key, cuda::ConvAlgos> cache;
  const cuda::ConvAlgos* algos = nullptr;

  CudaState() {
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    STRATA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    STRATA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    STRATA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_bwd_data));
    STRATA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_bwd_filter));
  }
  ~CudaState() {
    // Destructors must not throw: errors here are ignored.
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (cudnnConvolutionDescriptor_t c : {conv, conv_bwd_data, conv_bwd_filter}) {
      if (c) cudnnDestroyConvolutionDescriptor(c);
    }
  }
  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;

  cuda::ConvDescriptors descriptors() const {
    cuda::ConvDescriptors d;
    d.x = x;
    d.y = y;
    d.w = w;
    d.conv[static_cast<int>(cuda::ConvDirection::kForward)] = conv;
    d.conv[static_cast<int>(cuda::ConvDirection::kBackwardData)] = conv_bwd_data;
    d.conv[static_cast<int>(cuda::ConvDirection::kBackwardFilter)] = conv_bwd_filter;
    return d;
  }
  void set_math(const cuda::ConvAlgos& a) {
    STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, a.fwd_math));
    STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_bwd_data, a.bwd_data_math));
    STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_bwd_filter, a.bwd_filter_math));
  }
};

// Sets the descriptors for the current shape (a no-op when unchanged) and
// chooses the algorithms (once per shape and math mode). Timing them runs on
// zeroed buffers of the input's and the weights' sizes from the caching
// allocator (the speed of these kernels does not depend on the values), so
// it needs neither the bottom's memory, which the plan may not have placed
// yet, nor the weights on the device; it writes no blob.
void ConvolutionLayer::prepare_cudnn() {
  const cuda::DeviceGuard on_device(device().index);
  if (!cuda_) {
    cuda_ = std::make_shared<CudaState>();
    // Shape-independent parts (the convolution computes in f32 for every data type).
    for (cudnnConvolutionDescriptor_t c : {cuda_->conv, cuda_->conv_bwd_data, cuda_->conv_bwd_filter}) {
      STRATA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
          c, to_int(pad_.h, "pad_h"), to_int(pad_.w, "pad_w"), to_int(stride_.h, "stride_h"),
          to_int(stride_.w, "stride_w"), to_int(dilation_.h, "dilation_h"), to_int(dilation_.w, "dilation_w"),
          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      STRATA_CUDNN_CHECK(cudnnSetConvolutionGroupCount(c, to_int(group_, "group")));
    }
    STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(cuda_->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                  to_int(num_output_, "num_output"), 1, 1));
  }
  CudaState& st = *cuda_;
  const bool nhwc = call_layout() == Layout::kNHWC;
  const CudaState::Key key{num_, height_, width_, static_cast<int>(cuda::math_mode()), static_cast<int>(call_dtype()),
                           nhwc ? 1 : 0};
  if (key == st.current) return;
  const cudnnDataType_t data = cudnn_data_type(call_dtype());
  const bool reduced = call_dtype() != DType::kF32;
  // NHWC: the images [N][H][W][C] and the weight's copy KRSC (kept_weight).
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  STRATA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(st.w, data, format, to_int(num_output_, "num_output"),
                                                to_int(channels_ / group_, "channels per group"),
                                                to_int(kernel_.h, "kernel_h"), to_int(kernel_.w, "kernel_w")));
  STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(st.x, format, data, to_int(num_, "batch"),
                                                to_int(channels_, "channels"), to_int(height_, "height"),
                                                to_int(width_, "width")));
  STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(st.y, format, data, to_int(num_, "batch"),
                                                to_int(num_output_, "num_output"), to_int(out_h_, "out_h"),
                                                to_int(out_w_, "out_w")));
  auto found = st.cache.find(key);
  if (found == st.cache.end()) {
    // The math type asked for; the choice may run a direction in another.
    // 16-bit data: tensor cores in every math mode (conv_algos.h).
    const cudnnMathType_t math = reduced ? CUDNN_DEFAULT_MATH : cuda::cudnn_math_type();
    for (cudnnConvolutionDescriptor_t c : {st.conv, st.conv_bwd_data, st.conv_bwd_filter}) {
      STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(c, math));
    }
    cuda::ConvProblem p;
    p.n = num_;
    p.c = channels_;
    p.h = height_;
    p.w = width_;
    p.k = num_output_;
    p.kernel_h = kernel_.h;
    p.kernel_w = kernel_.w;
    p.pad_h = pad_.h;
    p.pad_w = pad_.w;
    p.stride_h = stride_.h;
    p.stride_w = stride_.w;
    p.dilation_h = dilation_.h;
    p.dilation_w = dilation_.w;
    p.group = group_;
    p.dtype = dtype_name(call_dtype());
    p.layout = layout_name(call_layout());
    p.math = static_cast<int>(math);
    cuda::ConvBuffers b;  // x and w null: timed on zeroed buffers
    const size_t elem = dtype_size(call_dtype());
    b.x_bytes = static_cast<size_t>(num_ * channels_ * height_ * width_) * elem;
    b.y_bytes = static_cast<size_t>(num_ * num_output_ * out_h_ * out_w_) * elem;
    b.w_bytes = static_cast<size_t>(param(0).numel()) * elem;
    found = st.cache.emplace(key, cuda::choose_conv_algos(p, st.descriptors(), b, where())).first;
  } else {
    st.set_math(found->second);
  }
  st.current = key;
  st.algos = &found->second;
}

size_t ConvolutionLayer::cudnn_workspace_bytes() const {
  if (!cuda_ || !cuda_->algos) return 0;
  const cuda::ConvAlgos& a = *cuda_->algos;
  if (phase() == Phase::kTest) return a.fwd_bytes;  // a TEST net runs forward only
  return std::max({a.fwd_bytes, a.bwd_data_bytes, a.bwd_filter_bytes});
}

ConvolutionLayer::CudaScratch ConvolutionLayer::lay_out_cuda_scratch(ScratchCarver& c, size_t workspace_bytes,
                                                                     bool backward) const {
  CudaScratch s;
  if (stored_path() && backward) s.weight_grad = c.take(param(0).shape(), call_dtype());
  if (call_layout() == Layout::kNHWC && bias_ == Bias::kYes && backward) {
    const int64_t partials = cuda::row_sums_partials(num_ * out_h_ * out_w_, num_output_);
    s.row_partials = c.take({partials * static_cast<int64_t>(sizeof(double))}, DType::kU8);
  }
  if (workspace_bytes > 0) s.workspace = c.take({static_cast<int64_t>(workspace_bytes)}, DType::kU8);
  return s;
}

Tensor ConvolutionLayer::kept_weight(bool refresh) {
  ScratchCarver carver(kept(kept_bytes()));
  Tensor w = carver.take(param(0).shape(), call_dtype());
  // Rounded (NHWC: and turned KCRS -> KRSC) on the device, on the compute stream.
  if (refresh) convert_layout_into(w, call_layout(), param(0).data, Layout::kNCHW);
  return w;
}

void ConvolutionLayer::forward_stored_cuda(const Tensor& x, Tensor& y) {
  CudaState& st = *cuda_;
  cudnnHandle_t h = cuda::cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  ScratchCarver counter;
  lay_out_cuda_scratch(counter, st.algos->fwd_bytes, false);
  ScratchCarver carver(scratch(counter.bytes()));
  CudaScratch s = lay_out_cuda_scratch(carver, st.algos->fwd_bytes, false);
  const Tensor w = kept_weight(true);
  STRATA_CUDNN_CHECK(cudnnConvolutionForward(h, &one, st.x, x.raw_data(), st.w, w.raw_data(), st.conv,
                                             st.algos->fwd, s.workspace.raw_data(), st.algos->fwd_bytes, &zero, st.y,
                                             y.raw_data()));
  if (bias_ == Bias::kYes) {
    const Rows r = bias_rows();
    cuda::add_channel_bias_stored(r.outer, num_output_, r.inner, param(1).data.device_data<float>(), y.raw_data(),
                                  call_dtype(), device_activation(epilogue()));
  }
}

void ConvolutionLayer::backward_stored_cuda(const Tensor& dy, const Tensor& x, Tensor* dx) {
  CudaState& st = *cuda_;
  cudnnHandle_t h = cuda::cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  const size_t ws_bytes = std::max(st.algos->bwd_filter_bytes, st.algos->bwd_data_bytes);
  ScratchCarver counter;
  lay_out_cuda_scratch(counter, ws_bytes, true);  // in a TEST net too (force_backward): scratch() then grows
  ScratchCarver carver(scratch(counter.bytes()));
  CudaScratch s = lay_out_cuda_scratch(carver, ws_bytes, true);
  // Parameter gradients accumulate, in f32: the bias's summed from the
  // 16-bit top gradient, the weight's computed in 16 bits and added.
  if (bias_ == Bias::kYes && call_layout() == Layout::kNHWC) {  // rows of channels: coalesced sums
    cuda::channel_row_sums(num_ * out_h_ * out_w_, num_output_, dy.raw_data(), nullptr, nullptr, call_dtype(),
                           cuda::RowTerm::kValue, 1.0, 1.0f, param(1).diff.device_data<float>(),
                           static_cast<double*>(s.row_partials.raw_data()));
  } else if (bias_ == Bias::kYes) {
    cuda::channel_sums_stored(num_, num_output_, out_h_ * out_w_, dy.raw_data(), nullptr, call_dtype(), 1.0f,
                              param(1).diff.device_data<float>());
  }
  STRATA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, st.x, x.raw_data(), st.y, dy.raw_data(),
                                                    st.conv_bwd_filter, st.algos->bwd_filter, s.workspace.raw_data(),
                                                    st.algos->bwd_filter_bytes, &zero, st.w,
                                                    s.weight_grad.raw_data()));
  if (call_layout() == Layout::kNHWC) {
    convert_layout_into(param(0).diff, Layout::kNCHW, s.weight_grad, Layout::kNHWC, /*accumulate=*/true);  // KRSC -> KCRS
  } else {
    cuda::accumulate_widened(param(0).numel(), s.weight_grad.raw_data(), call_dtype(),
                             param(0).diff.device_data<float>());
  }
  if (dx) {
    const Tensor w = kept_weight(false);  // as the forward rounded it
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, st.w, w.raw_data(), st.y, dy.raw_data(),
                                                    st.conv_bwd_data, st.algos->bwd_data, s.workspace.raw_data(),
                                                    st.algos->bwd_data_bytes, &zero, st.x, dx->raw_data()));
  }
}

std::string ConvolutionLayer::describe_runtime() const {
  return cuda_ && cuda_->algos ? cuda_->algos->description : std::string();
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
  check_call_dtype({&bottom[0]->data, &top[0]->data});  // the descriptors' type
  if (stored_path()) return forward_stored_cuda(bottom[0]->data, top[0]->data);
  CudaState& st = *cuda_;
  cudnnHandle_t h = cuda::cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  void* ws = workspace_in(scratch(st.algos->fwd_bytes), st.algos->fwd_bytes);
  STRATA_CUDNN_CHECK(cudnnConvolutionForward(h, &one, st.x, bottom[0]->data.device_data<float>(), st.w,
                                             param(0).data.device_data<float>(), st.conv, st.algos->fwd, ws,
                                             st.algos->fwd_bytes, &zero, st.y, top[0]->data.device_data<float>()));
  if (bias_ == Bias::kYes && epilogue().none()) {
    STRATA_CUDNN_CHECK(cudnnAddTensor(h, &one, st.bias, param(1).data.device_data<float>(), &one, st.y,
                                      top[0]->data.device_data<float>()));
  } else if (bias_ == Bias::kYes) {  // the bias and a fused ReLU in one pass
    cuda::add_channel_bias_stored(num_, num_output_, out_h_ * out_w_, param(1).data.device_data<float>(),
                                  top[0]->data.device_data<float>(), DType::kF32, device_activation(epilogue()));
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
  check_call_dtype({&top[0]->diff, &bottom[0]->data, &bottom[0]->diff});
  if (stored_path()) {
    return backward_stored_cuda(top[0]->diff, bottom[0]->data, propagate_down[0] ? &bottom[0]->diff : nullptr);
  }
  CudaState& st = *cuda_;
  cudnnHandle_t h = cuda::cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  const float* dy = top[0]->diff.device_data<float>();
  // Parameter gradients accumulate (beta = 1); the input gradient is overwritten.
  if (bias_ == Bias::kYes) {
    STRATA_CUDNN_CHECK(
        cudnnConvolutionBackwardBias(h, &one, st.y, dy, &one, st.bias, param(1).diff.device_data<float>()));
  }
  void* ws = workspace_in(scratch(st.algos->bwd_filter_bytes), st.algos->bwd_filter_bytes);
  STRATA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, st.x, bottom[0]->data.device_data<float>(), st.y, dy,
                                                    st.conv_bwd_filter, st.algos->bwd_filter, ws,
                                                    st.algos->bwd_filter_bytes, &one, st.w,
                                                    param(0).diff.device_data<float>()));
  if (propagate_down[0]) {
    ws = workspace_in(scratch(st.algos->bwd_data_bytes), st.algos->bwd_data_bytes);
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, st.w, param(0).data.device_data<float>(), st.y, dy,
                                                    st.conv_bwd_data, st.algos->bwd_data, ws,
                                                    st.algos->bwd_data_bytes, &zero, st.x,
                                                    bottom[0]->diff.device_data<float>()));
  }
}

}  // namespace strata
