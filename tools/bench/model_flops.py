#!/usr/bin/python3
"""Nominal FLOPs of the benchmark models, the numerator of the MFU figures
in docs/benchmarks.md: 2 FLOPs per multiply-add of every convolution and
matrix product as the model is written (direct convolution; Winograd and FFT
do fewer, so MFU can pass 100%), attention's two batched matmuls (Q K^T and
P V) included for ViT; element-wise work, norms, softmax and pooling not
counted. A training step is 3x the forward (forward, data gradient, weight
gradient); inference 1x.

  python3 tools/bench/model_flops.py     # prints GFLOP per image of each model
"""

# Channels per 3x3 convolution (padding 1), "M" a 2x2 max-pool.
CIFAR_VGG = (64, 64, "M", 128, 128, "M", 256, 256, "M")
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def _conv3x3_stack(cfg, hw, c=3):
    flops = 0
    for n in cfg:
        if n == "M":
            hw //= 2
        else:
            flops += 2 * c * 9 * n * hw * hw
            c = n
    return flops, c, hw


def cifar_vgg_forward_flops():
    flops, c, hw = _conv3x3_stack(CIFAR_VGG, 32)
    return flops + 2 * (c * hw * hw * 256 + 256 * 10)


def vgg16_forward_flops():
    flops, c, hw = _conv3x3_stack(VGG16, 224)
    return flops + 2 * (c * hw * hw * 4096 + 4096 * 4096 + 4096 * 1000)


def vit_forward_flops(image=224, patch=16, dim=768, depth=12, mlp=3072, classes=1000):
    patches = (image // patch) ** 2
    t = patches + 1  # the class token
    flops = 2 * patches * (3 * patch * patch) * dim  # patch embedding
    per_block = (2 * t * dim * 3 * dim      # q, k, v projections
                 + 2 * t * t * dim          # Q K^T over all heads
                 + 2 * t * t * dim          # P V
                 + 2 * t * dim * dim        # output projection
                 + 2 * t * dim * mlp * 2)   # fc1 and fc2
    return flops + depth * per_block + 2 * dim * classes


FORWARD_FLOPS = {"cifar_vgg": cifar_vgg_forward_flops, "vgg16": vgg16_forward_flops, "vit_b16": vit_forward_flops}
TASK_FACTOR = {"train": 3, "infer": 1, "embed": 1}


def gflop_per_image(model, task):
    """GFLOP one image costs in `task` (train, infer or embed); None for an unknown model."""
    if model not in FORWARD_FLOPS:
        return None
    return TASK_FACTOR[task] * FORWARD_FLOPS[model]() / 1e9


if __name__ == "__main__":
    for m in FORWARD_FLOPS:
        print(f"{m}: forward {gflop_per_image(m, 'infer'):.3f} GFLOP/image, "
              f"training step {gflop_per_image(m, 'train'):.3f} GFLOP/image")
