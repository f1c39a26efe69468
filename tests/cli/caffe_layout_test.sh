#!/usr/bin/env bash
# A Caffe user's folder trains as written: Caffe's examples/mnist solver and
# net, in Caffe's own spelling and paths relative to the Caffe root, run with
#   strata train --solver examples/mnist/lenet_solver.prototxt
# from that root, as Caffe's examples/mnist/train_lenet.sh runs caffe. Only
# the run lengths are shortened, and the LMDB Data layers are swapped for
# MnistData layers reading the idx files of data/mnist (what Caffe's
# data/mnist/get_mnist.sh leaves there), small ones made here.
#   1. it trains from the root: the net and the data are found from the
#      working directory; snapshots and log land under examples/mnist/;
#      solver_mode: GPU trains on the GPU, or says once that there is none;
#   2. run from elsewhere, the missing net is named with both places tried.
set -euo pipefail
strata="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
root="$work/caffe"
mkdir -p "$root/examples/mnist" "$root/data/mnist" "$work/elsewhere"

# Small MNIST-format files: 256 training and 200 test images of 28x28, labels 0-9.
python3 - "$root/data/mnist" <<'PY'
import os, struct, sys
out = sys.argv[1]
def write(prefix, n, seed):
    pixels, labels = bytearray(), bytearray()
    s = seed
    for i in range(n):
        label = i % 10
        for p in range(28 * 28):
            s = (s * 1103515245 + 12345) & 0x7fffffff
            # A bright bar whose row depends on the label, over noise.
            on = (p // 28) in (2 * label + 3, 2 * label + 4)
            pixels.append(200 + (s % 50) if on else s % 40)
        labels.append(label)
    with open(os.path.join(out, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
    with open(os.path.join(out, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, n) + bytes(labels))
write("train", 256, 1)
write("t10k", 200, 2)
PY

# Caffe's examples/mnist/lenet_solver.prototxt, as Caffe ships it.
cat > "$root/examples/mnist/lenet_solver.prototxt" <<'TXT'
# The train/test net protocol buffer definition
net: "examples/mnist/lenet_train_test.prototxt"
# test_iter specifies how many forward passes the test should carry out.
# In the case of MNIST, we have test batch size 100 and 100 test iterations,
# covering the full 10,000 testing images.
test_iter: 100
# Carry out testing every 500 training iterations.
test_interval: 500
# The base learning rate, momentum and the weight decay of the network.
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
# The learning rate policy
lr_policy: "inv"
gamma: 0.0001
power: 0.75
# Display every 100 iterations
display: 100
# The maximum number of iterations
max_iter: 10000
# snapshot intermediate results
snapshot: 5000
snapshot_prefix: "examples/mnist/lenet"
# solver mode: CPU or GPU
solver_mode: GPU
TXT
# Shorter: 30 iterations, a test of 2 batches every 15, snapshots every 15.
sed -i -e 's/^test_iter: 100/test_iter: 2/' -e 's/^test_interval: 500/test_interval: 15/' \
  -e 's/^display: 100/display: 10/' -e 's/^max_iter: 10000/max_iter: 30/' -e 's/^snapshot: 5000/snapshot: 15/' \
  "$root/examples/mnist/lenet_solver.prototxt"

# Caffe's examples/mnist/lenet_train_test.prototxt; the two Data layers
# (LMDB) are MnistData layers here, paths relative to the Caffe root.
data_layer() {  # phase, idx prefix, batch
  cat <<TXT
layer {
  name: "mnist"
  type: "MnistData"
  top: "data"
  top: "label"
  include {
    phase: $1
  }
  transform_param {
    scale: 0.00390625
  }
  mnist_data_param {
    source: "data/mnist/$2-images-idx3-ubyte"
    label_source: "data/mnist/$2-labels-idx1-ubyte"
    batch_size: $3
  }
}
TXT
}
{
  echo 'name: "LeNet"'
  data_layer TRAIN train 64
  data_layer TEST t10k 100
  cat <<'TXT'
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param {
    lr_mult: 1
  }
  param {
    lr_mult: 2
  }
  convolution_param {
    num_output: 20
    kernel_size: 5
    stride: 1
    weight_filler {
      type: "xavier"
    }
    bias_filler {
      type: "constant"
    }
  }
}
layer {
  name: "pool1"
  type: "Pooling"
  bottom: "conv1"
  top: "pool1"
  pooling_param {
    pool: MAX
    kernel_size: 2
    stride: 2
  }
}
layer {
  name: "conv2"
  type: "Convolution"
  bottom: "pool1"
  top: "conv2"
  param {
    lr_mult: 1
  }
  param {
    lr_mult: 2
  }
  convolution_param {
    num_output: 50
    kernel_size: 5
    stride: 1
    weight_filler {
      type: "xavier"
    }
    bias_filler {
      type: "constant"
    }
  }
}
layer {
  name: "pool2"
  type: "Pooling"
  bottom: "conv2"
  top: "pool2"
  pooling_param {
    pool: MAX
    kernel_size: 2
    stride: 2
  }
}
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "pool2"
  top: "ip1"
  param {
    lr_mult: 1
  }
  param {
    lr_mult: 2
  }
  inner_product_param {
    num_output: 500
    weight_filler {
      type: "xavier"
    }
    bias_filler {
      type: "constant"
    }
  }
}
layer {
  name: "relu1"
  type: "ReLU"
  bottom: "ip1"
  top: "ip1"
}
layer {
  name: "ip2"
  type: "InnerProduct"
  bottom: "ip1"
  top: "ip2"
  param {
    lr_mult: 1
  }
  param {
    lr_mult: 2
  }
  inner_product_param {
    num_output: 10
    weight_filler {
      type: "xavier"
    }
    bias_filler {
      type: "constant"
    }
  }
}
layer {
  name: "accuracy"
  type: "Accuracy"
  bottom: "ip2"
  bottom: "label"
  top: "accuracy"
  include {
    phase: TEST
  }
}
layer {
  name: "loss"
  type: "SoftmaxWithLoss"
  bottom: "ip2"
  bottom: "label"
  top: "loss"
}
TXT
} > "$root/examples/mnist/lenet_train_test.prototxt"

# 1. From the Caffe root, as train_lenet.sh runs it.
(cd "$root" && "$strata" train --solver examples/mnist/lenet_solver.prototxt --threads 2) > "$work/run.txt" 2>&1 ||
  { cat "$work/run.txt"; fail "training from the Caffe root"; }
for f in lenet_iter_15.safetensors lenet_iter_30.safetensors lenet_iter_30.solverstate.safetensors lenet_log.jsonl; do
  [ -f "$root/examples/mnist/$f" ] || { cat "$work/run.txt"; ls -R "$root"; fail "no examples/mnist/$f"; }
done
grep -q "accuracy" "$work/run.txt" || { cat "$work/run.txt"; fail "the TEST net's accuracy is not shown"; }
if grep -q "^device cuda" "$work/run.txt"; then
  echo "ok 1: trained on the GPU from the Caffe root (solver_mode: GPU)"
else
  n=$(grep -c "solver_mode: GPU, but" "$work/run.txt" || true)
  [ "$n" = 1 ] || { cat "$work/run.txt"; fail "expected one note that there is no GPU, got $n"; }
  echo "ok 1: trained on the CPU from the Caffe root: $(grep -o 'solver_mode: GPU, but[^:]*' "$work/run.txt")"
fi

# 2. From elsewhere the relative net path is not found; both places named.
if (cd "$work/elsewhere" && "$strata" train --solver "$root/examples/mnist/lenet_solver.prototxt") > "$work/away.txt" 2>&1; then
  fail "a run from outside the Caffe root found the net"
fi
grep -q "not found; tried '$work/elsewhere/examples/mnist/lenet_train_test.prototxt' (the working directory" \
  "$work/away.txt" || { cat "$work/away.txt"; fail "the working directory is not named"; }
grep -q "'$root/examples/mnist/examples/mnist/lenet_train_test.prototxt' (beside the file" "$work/away.txt" ||
  { cat "$work/away.txt"; fail "the place beside the solver is not named"; }
echo "ok 2: from elsewhere: $(grep -o 'not found; tried.*' "$work/away.txt" | cut -c1-90)..."

