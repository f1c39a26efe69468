#!/usr/bin/env python3
"""Writes the prototxts of the pretrained-model zoo in models/ (and, for the
golden tests, the same nets at toy sizes).

Every VGG and ViT model gets, in models/<name>/:
  deploy.prototxt           Input "data" 1x3x224x224 -> logits (ViT: blob "pre_logits" too)
  finetune.prototxt         ImageData TRAIN/TEST on ../../data/images, a new 10-class head
                            (`reinit: true`), SoftmaxWithLoss + Accuracy
  finetune_solver.prototxt  SGD + momentum (VGG); AdamW + cosine + warmup + layer_decay 0.65
                            + no_weight_decay (ViT)
  README.md                 where the weights come from, converting, embedding, fine-tuning
vgg16 and vit_b16 also get benchmark.prototxt (Input data + label -> net -> SoftmaxWithLoss, batch 1),
and resnet50, resnet101 and inception_v3 get only that and a README: the nets `strata estimate`
builds to count parameters and FLOPs per layer.
The layer and blob names are the ones the torchvision/timm name maps of
transfer/pretrained.h expect: VGG conv{b}_{i} ... fc6 fc7 fc8, ViT patch_embed, embed,
block{i}_*, ln, pre_logits, head.

Usage:  python3 tools/make_model_prototxts.py            (rewrites models/<name>/*.prototxt)
        python3 tools/make_model_prototxts.py --check    (exit 1 if a file is out of date)
tests/golden/make_model_golden.py imports vgg_body()
and vit_body() to write its toy nets, so both use one definition.
"""

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# torchvision's VGG configurations (torchvision/models/vgg.py cfgs "A", "D", "E"):
# channels per conv, "M" a 2x2 max pooling.
VGG_CFGS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}

# (hidden dim D, heads, mlp dim, layers); image 224, patch 16.
VIT_SIZES = {
    "vit_b16": (768, 12, 3072, 12),
    "vit_s16": (384, 6, 1536, 12),
    "vit_ti16": (192, 3, 768, 12),
}


def layer(name, type_, bottoms=(), tops=None, body="", extra=""):
    """One `layer { }` block; `tops` defaults to the layer name."""
    tops = [name] if tops is None else tops
    head = 'name: "%s"  type: "%s"' % (name, type_)
    for b in bottoms:
        head += '  bottom: "%s"' % b
    for t in tops:
        head += '  top: "%s"' % t
    if extra:
        head += "  " + extra
    if not body:
        return "layer { %s }\n" % head
    return "layer {\n  %s\n  %s\n}\n" % (head, body)


# ---------------------------------------------------------------- VGG

def vgg_body(cfg, batch_norm=False, num_classes=1000, fc_dim=4096, pooled=7, bottom="data",
             head_reinit=False, dropout=0.5):
    """The layers after the input, as torchvision's VGG (max pooling rounds down, as
    torch's does): features, adaptive average
    pooling to pooled x pooled, classifier fc6 relu6 drop6 fc7 relu7 drop7 fc8.
    ReLU and Dropout run in place (Caffe's VGG convention), so blob "fc7" holds the
    post-ReLU activations and the net's output blob is "fc8"."""
    out = []
    block, index = 1, 1
    prev = bottom
    for v in cfg:
        if v == "M":
            name = "pool%d" % block
            out.append(layer(name, "Pooling", [prev],
                             body="pooling_param { pool: MAX kernel_size: 2 stride: 2 round_mode: FLOOR }"))
            prev = name
            block, index = block + 1, 1
            continue
        conv = "conv%d_%d" % (block, index)
        out.append(layer(conv, "Convolution", [prev], body=(
            "convolution_param { num_output: %d kernel_size: 3 pad: 1\n"
            "    weight_filler { type: \"msra\" variance_norm: FAN_OUT } }" % v)))
        act = conv
        if batch_norm:
            bn, sc = "bn%d_%d" % (block, index), "scale%d_%d" % (block, index)
            # torchvision's BatchNorm2d: eps 1e-5, momentum 0.1.
            out.append(layer(bn, "BatchNorm", [conv], body=(
                "batch_norm_param { eps: 1e-5 moving_average_fraction: 0.9 }")))
            out.append(layer(sc, "Scale", [bn], body="scale_param { bias_term: true }"))
            act = sc
        out.append(layer("relu%d_%d" % (block, index), "ReLU", [act], [act]))
        prev = act
        index += 1
    out.append(layer("avgpool", "AdaptivePooling", [prev], body=(
        "adaptive_pooling_param { output_size: %d pool: AVE }" % pooled)))
    prev = "avgpool"
    for i, n in ((6, fc_dim), (7, fc_dim)):
        fc = "fc%d" % i
        out.append(layer(fc, "InnerProduct", [prev], body=(
            "inner_product_param { num_output: %d\n"
            "    weight_filler { type: \"gaussian\" std: 0.01 } }" % n)))
        out.append(layer("relu%d" % i, "ReLU", [fc], [fc]))
        out.append(layer("drop%d" % i, "Dropout", [fc], [fc],
                         body="dropout_param { dropout_ratio: %g }" % dropout))
        prev = fc
    out.append(layer("fc8", "InnerProduct", [prev], body=(
        "inner_product_param { num_output: %d\n"
        "    weight_filler { type: \"gaussian\" std: 0.01 } }" % num_classes),
        extra="reinit: true" if head_reinit else ""))
    return "".join(out), "fc8"


# ---------------------------------------------------------------- ViT

def vit_body(dim, heads, mlp, layers, patch=16, num_classes=1000, bottom="data", head_reinit=False):
    """torchvision's VisionTransformer (= timm's ViT with a class token, pre-norm blocks,
    final LayerNorm, class-token pooling): patch_embed, embed (class token + position
    embedding), blocks, ln, pre_logits (the class token, blob "pre_logits"), head.
    Blob names are the layer names."""
    out = [
        layer("patch_embed", "PatchEmbed", [bottom], body=(
            "patch_embed_param { patch_size: %d num_output: %d }" % (patch, dim))),
        layer("embed", "PositionEmbedding", ["patch_embed"], body=(
            "position_embedding_param { class_token: true filler { type: \"gaussian\" std: 0.02 } }")),
    ]
    prev = "embed"
    for i in range(layers):
        p = "block%d_" % i
        out += [
            layer(p + "ln1", "LayerNorm", [prev], body="layer_norm_param { eps: 1e-6 }"),
            layer(p + "attn", "MultiHeadAttention", [p + "ln1"], body=(
                "attention_param { num_heads: %d }" % heads)),
            layer(p + "add1", "Eltwise", [prev, p + "attn"], body="eltwise_param { operation: SUM }"),
            layer(p + "ln2", "LayerNorm", [p + "add1"], body="layer_norm_param { eps: 1e-6 }"),
            layer(p + "fc1", "InnerProduct", [p + "ln2"], body=(
                "inner_product_param { num_output: %d axis: 2 }" % mlp)),
            layer(p + "gelu", "GELU", [p + "fc1"]),
            layer(p + "fc2", "InnerProduct", [p + "gelu"], body=(
                "inner_product_param { num_output: %d axis: 2 }" % dim)),
            layer(p + "add2", "Eltwise", [p + "add1", p + "fc2"], body="eltwise_param { operation: SUM }"),
        ]
        prev = p + "add2"
    out += [
        layer("ln", "LayerNorm", [prev], body="layer_norm_param { eps: 1e-6 }"),
        layer("pre_logits", "TokenPool", ["ln"], body="token_pool_param { pool: CLASS_TOKEN }"),
        layer("head", "InnerProduct", ["pre_logits"], body=(
            "inner_product_param { num_output: %d\n"
            "    weight_filler { type: \"gaussian\" std: 0.01 } }" % num_classes),
            extra="reinit: true" if head_reinit else ""),
    ]
    return "".join(out), "head"


# ---------------------------------------------------------------- ResNet, Inception V3
# For `strata estimate` and `strata time`: the parameter layout and shapes of
# torchvision's resnet50, resnet101 and inception_v3 (no pretrained name maps
# yet, so no finetune files).

def conv_bn_relu(out, name, bottom, num_output, kernel, stride=1, pad=0, eps=1e-5, relu=True):
    """Convolution without bias + BatchNorm + Scale (+ ReLU in place), torchvision's
    conv/BatchNorm2d pairs. kernel and pad are ints or (h, w) pairs. Returns the top."""
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    ph, pw = pad if isinstance(pad, tuple) else (pad, pad)
    geometry = ("kernel_size: %d" % kh if kh == kw else "kernel_h: %d kernel_w: %d" % (kh, kw))
    if ph or pw:
        geometry += " pad: %d" % ph if ph == pw else " pad_h: %d pad_w: %d" % (ph, pw)
    if stride != 1:
        geometry += " stride: %d" % stride
    out.append(layer(name, "Convolution", [bottom], body=(
        "convolution_param { num_output: %d %s bias_term: false\n"
        "    weight_filler { type: \"msra\" } }" % (num_output, geometry))))
    out.append(layer(name + "_bn", "BatchNorm", [name], body="batch_norm_param { eps: %g }" % eps))
    out.append(layer(name + "_scale", "Scale", [name + "_bn"], body="scale_param { bias_term: true }"))
    if relu:
        out.append(layer(name + "_relu", "ReLU", [name + "_scale"], [name + "_scale"]))
    return name + "_scale"


def pool(out, name, bottom, kind, kernel, stride, pad=0):
    out.append(layer(name, "Pooling", [bottom], body=(
        "pooling_param { pool: %s kernel_size: %d stride: %d%s round_mode: FLOOR }"
        % (kind, kernel, stride, " pad: %d" % pad if pad else ""))))
    return name


RESNET_BLOCKS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3)}


def resnet_body(blocks, num_classes=1000, bottom="data"):
    """torchvision's ResNet with Bottleneck blocks (v1.5: the stride in the 3x3):
    conv1 7x7/2, maxpool 3x3/2, layer1..layer4, global average pooling, fc."""
    out = []
    prev = conv_bn_relu(out, "conv1", bottom, 64, 7, stride=2, pad=3)
    prev = pool(out, "maxpool", prev, "MAX", 3, 2, pad=1)
    channels = 64
    for stage, count in enumerate(blocks, start=1):
        width = 64 * 2 ** (stage - 1)
        for b in range(count):
            p = "layer%d_%d_" % (stage, b)
            stride = 2 if b == 0 and stage > 1 else 1
            x = conv_bn_relu(out, p + "conv1", prev, width, 1)
            x = conv_bn_relu(out, p + "conv2", x, width, 3, stride=stride, pad=1)
            x = conv_bn_relu(out, p + "conv3", x, width * 4, 1, relu=False)
            shortcut = prev
            if b == 0:
                shortcut = conv_bn_relu(out, p + "downsample", prev, width * 4, 1, stride=stride, relu=False)
            out.append(layer(p + "add", "Eltwise", [shortcut, x], body="eltwise_param { operation: SUM }"))
            out.append(layer(p + "relu", "ReLU", [p + "add"], [p + "add"]))
            prev = p + "add"
        channels = width * 4
    out.append(layer("avgpool", "Pooling", [prev], body="pooling_param { pool: AVE global_pooling: true }"))
    out.append(layer("fc", "InnerProduct", ["avgpool"], body=(
        "inner_product_param { num_output: %d\n"
        "    weight_filler { type: \"gaussian\" std: 0.01 } }" % num_classes)))
    return "".join(out), "fc"


def inception_v3_body(num_classes=1000, bottom="data"):
    """torchvision's inception_v3 without the auxiliary classifier (299x299 input,
    BatchNorm eps 0.001): the stem, Mixed_5b..Mixed_7c, global average pooling,
    dropout, fc. Each branch ends in its own blob; Concat joins them."""
    out = []

    def cbr(name, b, n, k, stride=1, pad=0):
        return conv_bn_relu(out, name, b, n, k, stride=stride, pad=pad, eps=1e-3)

    def concat(name, parts):
        out.append(layer(name, "Concat", parts, body="concat_param { axis: 1 }"))
        return name

    def avg_branch(name, b, n):
        pool(out, name + "_pool", b, "AVE", 3, 1, pad=1)
        return cbr(name, name + "_pool", n, 1)

    def block_a(m, b, pool_features):
        return concat(m, [cbr(m + "_branch1x1", b, 64, 1),
                          cbr(m + "_branch5x5_2", cbr(m + "_branch5x5_1", b, 48, 1), 64, 5, pad=2),
                          cbr(m + "_branch3x3dbl_3", cbr(m + "_branch3x3dbl_2", cbr(m + "_branch3x3dbl_1", b, 64, 1),
                                                         96, 3, pad=1), 96, 3, pad=1),
                          avg_branch(m + "_branch_pool", b, pool_features)])

    def block_b(m, b):
        return concat(m, [cbr(m + "_branch3x3", b, 384, 3, stride=2),
                          cbr(m + "_branch3x3dbl_3", cbr(m + "_branch3x3dbl_2", cbr(m + "_branch3x3dbl_1", b, 64, 1),
                                                         96, 3, pad=1), 96, 3, stride=2),
                          pool(out, m + "_branch_pool", b, "MAX", 3, 2)])

    def block_c(m, b, c7):
        x = cbr(m + "_branch7x7_1", b, c7, 1)
        x = cbr(m + "_branch7x7_2", x, c7, (1, 7), pad=(0, 3))
        seven = cbr(m + "_branch7x7_3", x, 192, (7, 1), pad=(3, 0))
        y = cbr(m + "_branch7x7dbl_1", b, c7, 1)
        y = cbr(m + "_branch7x7dbl_2", y, c7, (7, 1), pad=(3, 0))
        y = cbr(m + "_branch7x7dbl_3", y, c7, (1, 7), pad=(0, 3))
        y = cbr(m + "_branch7x7dbl_4", y, c7, (7, 1), pad=(3, 0))
        double = cbr(m + "_branch7x7dbl_5", y, 192, (1, 7), pad=(0, 3))
        return concat(m, [cbr(m + "_branch1x1", b, 192, 1), seven, double, avg_branch(m + "_branch_pool", b, 192)])

    def block_d(m, b):
        three = cbr(m + "_branch3x3_2", cbr(m + "_branch3x3_1", b, 192, 1), 320, 3, stride=2)
        x = cbr(m + "_branch7x7x3_1", b, 192, 1)
        x = cbr(m + "_branch7x7x3_2", x, 192, (1, 7), pad=(0, 3))
        x = cbr(m + "_branch7x7x3_3", x, 192, (7, 1), pad=(3, 0))
        x = cbr(m + "_branch7x7x3_4", x, 192, 3, stride=2)
        return concat(m, [three, x, pool(out, m + "_branch_pool", b, "MAX", 3, 2)])

    def block_e(m, b):
        x = cbr(m + "_branch3x3_1", b, 384, 1)
        three = concat(m + "_branch3x3", [cbr(m + "_branch3x3_2a", x, 384, (1, 3), pad=(0, 1)),
                                          cbr(m + "_branch3x3_2b", x, 384, (3, 1), pad=(1, 0))])
        y = cbr(m + "_branch3x3dbl_2", cbr(m + "_branch3x3dbl_1", b, 448, 1), 384, 3, pad=1)
        double = concat(m + "_branch3x3dbl", [cbr(m + "_branch3x3dbl_3a", y, 384, (1, 3), pad=(0, 1)),
                                              cbr(m + "_branch3x3dbl_3b", y, 384, (3, 1), pad=(1, 0))])
        return concat(m, [cbr(m + "_branch1x1", b, 320, 1), three, double, avg_branch(m + "_branch_pool", b, 192)])

    x = cbr("Conv2d_1a_3x3", bottom, 32, 3, stride=2)
    x = cbr("Conv2d_2a_3x3", x, 32, 3)
    x = cbr("Conv2d_2b_3x3", x, 64, 3, pad=1)
    x = pool(out, "maxpool1", x, "MAX", 3, 2)
    x = cbr("Conv2d_3b_1x1", x, 80, 1)
    x = cbr("Conv2d_4a_3x3", x, 192, 3)
    x = pool(out, "maxpool2", x, "MAX", 3, 2)
    x = block_a("Mixed_5b", x, 32)
    x = block_a("Mixed_5c", x, 64)
    x = block_a("Mixed_5d", x, 64)
    x = block_b("Mixed_6a", x)
    for m, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = block_c(m, x, c7)
    x = block_d("Mixed_7a", x)
    x = block_e("Mixed_7b", x)
    x = block_e("Mixed_7c", x)
    out.append(layer("avgpool", "Pooling", [x], body="pooling_param { pool: AVE global_pooling: true }"))
    out.append(layer("dropout", "Dropout", ["avgpool"], ["avgpool"], body="dropout_param { dropout_ratio: 0.5 }"))
    out.append(layer("fc", "InnerProduct", ["avgpool"], body=(
        "inner_product_param { num_output: %d\n"
        "    weight_filler { type: \"gaussian\" std: 0.01 } }" % num_classes)))
    return "".join(out), "fc"


def benchmark_net(name, comment, body, logits, size=224):
    """The net as synthetic-data benchmarks train it: Input blobs data (1x3xSxS) and
    label, the net, SoftmaxWithLoss. Batch 1 keeps building it cheap; `strata
    estimate --device-throughput ... --batch N` scales to the batch measured."""
    inputs = layer("data", "Input", tops=["data", "label"], body=(
        "input_param { shape { dim: 1 dim: 3 dim: %d dim: %d } shape { dim: 1 } }" % (size, size)))
    tail = layer("loss", "SoftmaxWithLoss", [logits, "label"], ["loss"])
    return "# %s\nname: \"%s\"\n\n%s%s%s" % (comment, name, inputs, body, tail)


ESTIMATE_README = """# {name}

torchvision's `{fn}` ({what}) as a strata net, for predicting how it scales
(`strata estimate`, [docs/estimate.md](../../docs/estimate.md)) and timing it (`strata time`).
Layers: {layers}. Every convolution is followed by
`<conv>_bn` (BatchNorm) and `<conv>_scale` (Scale: torchvision's BatchNorm2d weight and bias){relu}.

| file | what |
|---|---|
| `benchmark.prototxt` | Input `data` 1x3x{size}x{size} and `label` -> logits `fc` -> SoftmaxWithLoss: the net as synthetic-data benchmarks train it |

{params:,} learnable parameters, as torchvision's `{fn}({args})`
(`sum(p.numel() for p in model.parameters())`). {note}

```sh
./build/strata estimate --model models/{name}/benchmark.prototxt --device-throughput 1000 --batch 64 \\
    --workers 1,8,64,512 --link ib-hdr --gpus-per-node 8 --node-link nvlink-a100 --strategy dp-ring
```

There is no name map for torchvision's weights yet, so no fine-tuning files. The prototxts are generated
by `tools/make_model_prototxts.py`; edit that script, not the files.
"""

ESTIMATE_MODELS = {
    # name: (what, fn, args, params, size, layers, relu, note)
    "resnet50": ("Bottleneck blocks 3-4-6-3, stride in the 3x3 convolution (v1.5)", "resnet50", "", 25557032, 224,
                 "`conv1`, `maxpool`, `layer{s}_{b}_conv1..3` with `layer{s}_0_downsample`, `layer{s}_{b}_add`, "
                 "`layer{s}_{b}_relu`, `avgpool`, `fc`", ", then `<conv>_relu` in place where torchvision has one", ""),
    "resnet101": ("Bottleneck blocks 3-4-23-3, stride in the 3x3 convolution (v1.5)", "resnet101", "", 44549160, 224,
                  "`conv1`, `maxpool`, `layer{s}_{b}_conv1..3` with `layer{s}_0_downsample`, `layer{s}_{b}_add`, "
                  "`layer{s}_{b}_relu`, `avgpool`, `fc`", ", then `<conv>_relu` in place where torchvision has one",
                  ""),
    "inception_v3": ("299x299 input, no auxiliary classifier", "inception_v3", "aux_logits=False", 23834568, 299,
                     "`Conv2d_1a_3x3` ... `Conv2d_4a_3x3`, `maxpool1`, `maxpool2`, `Mixed_5b` ... `Mixed_7c` "
                     "(each branch `Mixed_*_branch*`, joined by a Concat named after the block), `avgpool`, "
                     "`dropout`, `fc`", ", then `<conv>_relu` in place",
                     "The auxiliary classifier torchvision trains with (`aux_logits=True`, 3,326,696 more "
                     "parameters, about 12% more gradient bytes) is left out. The 3x3 average poolings of the "
                     "`branch_pool` branches count the padding as Caffe does (torchvision's default too)."),
}


# ---------------------------------------------------------------- files

def input_layer(shape, top="data"):
    dims = " ".join("dim: %d" % d for d in shape)
    return layer("data", "Input", tops=[top], body="input_param { shape { %s } }" % dims)


def deploy_net(name, comment, body, shape=(1, 3, 224, 224), preset=None, preset_note=""):
    """preset: the image transform the weights were trained with (the net's
    `preset:` key, which `strata embed` uses when --preset is not given)."""
    head = "# %s\nname: \"%s\"\n" % (comment, name)
    if preset:
        head += "%spreset: %s\n" % ("# %s\n" % preset_note if preset_note else "", preset)
    return "%s\n%s%s" % (head, input_layer(shape), body)


def image_data_layers(preset, train_batch, test_batch):
    """TRAIN and TEST ImageData layers on the bundled sample images."""
    def one(phase, source, batch, train):
        aug = "  crop: RANDOM  mirror: true" if train else ""
        return (
            "layer {\n"
            "  name: \"data\"  type: \"ImageData\"  top: \"data\"  top: \"label\"\n"
            "  include { phase: %s }\n"
            "  image_data_param { source: \"%s\"  batch_size: %d  shuffle: %s }\n"
            "  transform_param { preset: %s%s }\n"
            "}\n" % (phase, source, batch, "true" if train else "false", preset, aug))
    return (one("TRAIN", "../../data/images/train", train_batch, True) +
            one("TEST", "../../data/images/val", test_batch, False))


def finetune_net(name, comment, body, logits, preset, train_batch=16, test_batch=8):
    tail = (
        layer("loss", "SoftmaxWithLoss", [logits, "label"], ["loss"]) +
        layer("accuracy", "Accuracy", [logits, "label"], ["accuracy"], extra="include { phase: TEST }"))
    return "# %s\nname: \"%s\"\n\n%s\n%s%s" % (comment, name, image_data_layers(preset, train_batch, test_batch),
                                             body, tail)


VGG_SOLVER = """\
# Fine-tunes finetune.prototxt (pretrained backbone, new fc8) with SGD + momentum,
# as torchvision's transfer-learning tutorial does. Start it with
#   strata train --solver models/{name}/finetune_solver.prototxt --weights {name}.safetensors
net: "finetune.prototxt"
type: "SGD"
base_lr: 0.001
momentum: 0.9
weight_decay: 0.0005
lr_policy: "cosine"
warmup_iter: 20
max_iter: 300
test_iter: 1
test_interval: 100
display: 10
snapshot: 0
snapshot_prefix: "snapshots/{name}_finetune"
random_seed: 1
"""

VIT_SOLVER = """\
# Fine-tunes finetune.prototxt (pretrained backbone, new head) the way ViTs are usually
# fine-tuned: AdamW, cosine schedule with linear warmup, layer-wise learning-rate decay
# 0.65 (block i's rate is scaled by 0.65^(L - i), the embeddings' by 0.65^(L + 1)), and
# no weight decay on biases, norms, the class token and the position embedding. Start it with
#   strata train --solver models/{name}/finetune_solver.prototxt --weights {name}.safetensors
net: "finetune.prototxt"
type: "AdamW"
base_lr: 0.0005
momentum: 0.9
momentum2: 0.999
weight_decay: 0.05
lr_policy: "cosine"
warmup_iter: 30
max_iter: 300
layer_decay: 0.65
no_weight_decay: BIASES_NORMS_EMBEDDINGS
clip_gradients: 1.0
test_iter: 1
test_interval: 100
display: 10
snapshot: 0
snapshot_prefix: "snapshots/{name}_finetune"
random_seed: 1
"""


VGG_SOURCES = {
    "vgg11": ("configuration A: 8 convolutions", "vgg11", "VGG11_Weights.IMAGENET1K_V1"),
    "vgg16": ("configuration D: 13 convolutions", "vgg16", "VGG16_Weights.IMAGENET1K_V1"),
    "vgg19": ("configuration E: 16 convolutions", "vgg19", "VGG19_Weights.IMAGENET1K_V1"),
    "vgg16_bn": ("configuration D with BatchNorm after every convolution", "vgg16_bn",
                 "VGG16_BN_Weights.IMAGENET1K_V1"),
}
VIT_TIMM = {
    "vit_b16": "vit_base_patch16_224.augreg2_in21k_ft_in1k",
    "vit_s16": "vit_small_patch16_224.augreg_in21k_ft_in1k",
    "vit_ti16": "vit_tiny_patch16_224.augreg_in21k_ft_in1k",
}

README_COMMON = """
## Embed images

```sh
./build/strata embed --model models/{name}/deploy.prototxt --weights {name}.safetensors \\
    --layer {embed_layer} --images data/images/val --out {name}_features.npy
```

writes one {embed_dim}-wide row per image ({embed_what}) and, beside it, `{name}_features.paths.txt`
with the image paths in row order. `--layer {logits}` gives the 1000 ImageNet logits instead.
Images are transformed with the preset `deploy.prototxt` declares ({embed_preset}).

## Fine-tune on your own classes

`finetune.prototxt` reads `data/images/train` and `data/images/val` (folders of class
subfolders; the bundled ones are three classes of upscaled digits, for trying the commands)
and replaces the 1000-class `{logits}` by a new 10-class layer marked `reinit: true`, so the
file's `{logits}` is not loaded. For your data, point `image_data_param.source` at your folders
and set `{logits}`'s `num_output` to your number of classes.

```sh
./build/strata train --solver models/{name}/finetune_solver.prototxt --weights {name}.safetensors
```

{solver_note}
The weights' names are mapped automatically ({formats}); `--weights-format` names the layout
when detection is not wanted, and `--freeze 'PATTERN'` freezes layers by name
(e.g. {freeze_example}).

## Checked against PyTorch

`tests/model_golden_test.cpp` compares a narrow model of the same layout, loaded through the
same name maps, with torchvision's output (logits and embeddings within 1e-4 of their largest
magnitude). `tools/check_full_models.py` does the same for the full-size VGG-16, VGG-16-BN
and ViT-B/16 with random weights (not in CI: the files are large). Measured (2 cores, CPU), as
max error / max magnitude: VGG-16 fc8 9.2e-7, fc7 8.8e-7; VGG-16-BN fc8 5.6e-7, fc7 5.3e-7;
ViT-B/16 head 1.7e-6, pre_logits 1.5e-6.

The prototxts are generated by `tools/make_model_prototxts.py`; edit that script, not the files.
"""


def vgg_readme(name):
    what, fn, weights = VGG_SOURCES[name]
    head = """# {name}

torchvision's `{fn}` ({what}), 224x224 RGB input, 1000 ImageNet classes. Layers
`conv{{b}}_{{i}}`{bn}, `relu{{b}}_{{i}}`, `pool{{b}}`, `avgpool` (adaptive 7x7 average), `fc6`
`relu6` `drop6` `fc7` `relu7` `drop7` `fc8`. ReLU and Dropout run in place, so blob `fc7`
holds the activations after ReLU: the usual VGG image embedding.

| file | what |
|---|---|
| `deploy.prototxt` | Input `data` 1x3x224x224 -> logits `fc8` |
| `finetune.prototxt` | ImageData TRAIN/TEST (preset IMAGENET), new 10-class `fc8`, loss + accuracy |
| `finetune_solver.prototxt` | SGD, momentum 0.9, lr 0.001, cosine with warmup |

## Weights

torchvision's ImageNet weights (`{weights}`), converted to safetensors:

```sh
/usr/bin/python3 -c "import torch, torchvision; torch.save(torchvision.models.{fn}(weights='IMAGENET1K_V1').state_dict(), '{name}.pth')"
/usr/bin/python3 tools/convert_pth_to_safetensors.py {name}.pth {name}.safetensors
```

(`torchvision.models.{fn}(weights=...)` downloads the file once; any saved `state_dict` of a
torchvision VGG works the same way.) Images are preprocessed as torchvision does (preset
IMAGENET: resize 256, centre crop 224, ImageNet mean/std).
""".format(name=name, fn=fn, what=what, weights=weights,
           bn=", `bn{b}_{i}` + `scale{b}_{i}`" if name.endswith("_bn") else "")
    return head + README_COMMON.format(
        name=name, embed_layer="fc7", embed_preset="`preset: IMAGENET`", embed_dim=4096,
        embed_what="fc7 after ReLU", logits="fc8", formats="torchvision's `features.N` / `classifier.N`",
        freeze_example="`--freeze 'conv*'` keeps the convolutions fixed",
        solver_note="The solver is SGD with momentum 0.9, lr 0.001 and a cosine schedule, the usual "
                    "recipe for fine-tuning a VGG;\nthe new `fc8` starts from N(0, 0.01).")


def vit_readme(name):
    dim, heads, mlp, depth = VIT_SIZES[name]
    preset = "IMAGENET" if name == "vit_b16" else "VIT_EVAL"
    if name == "vit_b16":
        source = """torchvision's `vit_b_16` ImageNet weights (trained with torchvision's transform: preset IMAGENET,
which `finetune.prototxt` uses):

```sh
/usr/bin/python3 -c "import torch, torchvision; torch.save(torchvision.models.vit_b_16(weights='IMAGENET1K_V1').state_dict(), 'vit_b16.pth')"
/usr/bin/python3 tools/convert_pth_to_safetensors.py vit_b16.pth vit_b16.safetensors
```

or timm's `{timm}` (mean = std = 0.5, bicubic: use preset VIT_EVAL in
`finetune.prototxt` and `--preset vit` with `strata embed`):
""".format(timm=VIT_TIMM[name])
    else:
        source = """timm's `{timm}` (torchvision has no ViT-{size}); timm's evaluation transform is
resize 248 bicubic, centre crop 224, mean = std = 0.5: preset VIT_EVAL, which
`finetune.prototxt` uses:
""".format(timm=VIT_TIMM[name], size="S/16" if name == "vit_s16" else "Ti/16")
    timm_cmd = """
```sh
/usr/bin/python3 -c "import timm, torch; torch.save(timm.create_model('{timm}', pretrained=True).state_dict(), '{name}.pth')"
/usr/bin/python3 tools/convert_pth_to_safetensors.py {name}.pth {name}.safetensors
```
""".format(timm=VIT_TIMM[name], name=name)
    head = """# {name}

Vision Transformer {size}/16 as torchvision's `VisionTransformer` and timm's `VisionTransformer`
lay it out: D = {dim}, {heads} heads, MLP {mlp}, {depth} pre-norm blocks, 224x224 input in 16x16
patches (196 tokens + a class token), LayerNorm eps 1e-6, exact GELU. Layers `patch_embed`,
`embed` (class token + position embedding), `block{{i}}_ln1`, `block{{i}}_attn`, `block{{i}}_add1`,
`block{{i}}_ln2`, `block{{i}}_fc1`, `block{{i}}_gelu`, `block{{i}}_fc2`, `block{{i}}_add2`
(i = 0..{last}), `ln`, `pre_logits` (the class token: the image embedding), `head`.

| file | what |
|---|---|
| `deploy.prototxt` | Input `data` 1x3x224x224 -> logits `head`; embedding blob `pre_logits` |
| `finetune.prototxt` | ImageData TRAIN/TEST (preset {preset}), new 10-class `head`, loss + accuracy |
| `finetune_solver.prototxt` | AdamW, cosine with warmup, layer_decay 0.65, no weight decay on biases, norms and embeddings |

## Weights

{source}{timm_cmd}""".format(name=name, size={"vit_b16": "B", "vit_s16": "S", "vit_ti16": "Ti"}[name],
                              dim=dim, heads=heads, mlp=mlp, depth=depth, last=depth - 1, preset=preset,
                              source=source, timm_cmd=timm_cmd)
    return head + README_COMMON.format(
        name=name, embed_layer="pre_logits",
        embed_preset="`preset: IMAGENET`; `--preset vit` for timm's weights" if name == "vit_b16"
        else "`preset: VIT_EVAL`",
        embed_dim=dim, embed_what="the class token after the final LayerNorm", logits="head",
        formats="torchvision's `encoder.layers.encoder_layer_N` with `mlp.0`/`mlp.3` or the older "
                "`mlp.linear_1`/`mlp.linear_2`, or timm's `blocks.N`",
        freeze_example="`--freeze 'patch_embed' --freeze 'embed' --freeze 'block?_*'` trains only blocks 10, 11 "
                       "and the head",
        solver_note="The solver follows the usual ViT fine-tuning recipe: AdamW (lr 5e-4, weight decay 0.05), "
                    "cosine schedule\nwith warmup, gradient clipping at 1, `layer_decay: 0.65` (block i learns at "
                    "0.65^({depth} - i) of the rate,\nthe patch and position embeddings at 0.65^{d1}) and "
                    "`no_weight_decay: BIASES_NORMS_EMBEDDINGS`.".format(depth=depth, d1=depth + 1))


def model_files():
    """{relative path: text} for every generated file under models/."""
    files = {}
    for name, cfg in list(VGG_CFGS.items()) + [("vgg16_bn", VGG_CFGS["vgg16"])]:
        bn = name.endswith("_bn")
        what = "%s as torchvision's (%s)" % (name, "with batch norm" if bn else "no batch norm")
        body, logits = vgg_body(cfg, batch_norm=bn)
        files["models/%s/deploy.prototxt" % name] = deploy_net(
            name, what + ": 1x3x224x224 image -> 1000 ImageNet logits (blob fc8)", body,
            preset="IMAGENET", preset_note="images as torchvision's weights were trained on them")
        ft_body, _ = vgg_body(cfg, batch_norm=bn, num_classes=10, head_reinit=True)
        files["models/%s/finetune.prototxt" % name] = finetune_net(
            name, what + ", fine-tuning: pretrained features and fc6/fc7, a new 10-class fc8",
            ft_body, logits, "IMAGENET")
        files["models/%s/finetune_solver.prototxt" % name] = VGG_SOLVER.format(name=name)
        files["models/%s/README.md" % name] = vgg_readme(name)
    for name, (dim, heads, mlp, depth) in VIT_SIZES.items():
        what = "%s (ViT, D=%d, %d heads, MLP %d, %d blocks, patch 16)" % (name, dim, heads, mlp, depth)
        body, logits = vit_body(dim, heads, mlp, depth)
        # torchvision's vit_b_16 weights were trained with its ImageNet transform;
        # timm's ViTs (the only source of S/16 and Ti/16) with mean = std = 0.5, bicubic.
        preset = "IMAGENET" if name == "vit_b16" else "VIT_EVAL"
        note = ("images as torchvision's vit_b_16 weights were trained on them "
                "(timm's weights: strata embed --preset vit)" if name == "vit_b16"
                else "images as timm's weights were trained on them")
        files["models/%s/deploy.prototxt" % name] = deploy_net(
            name, what + ": 1x3x224x224 image -> 1000 logits (blob head); "
            "embedding: blob pre_logits", body, preset=preset, preset_note=note)
        ft_body, _ = vit_body(dim, heads, mlp, depth, num_classes=10, head_reinit=True)
        files["models/%s/finetune.prototxt" % name] = finetune_net(
            name, what + ", fine-tuning: pretrained backbone, a new 10-class head", ft_body, logits,
            preset, train_batch=16, test_batch=8)
        files["models/%s/finetune_solver.prototxt" % name] = VIT_SOLVER.format(name=name)
        files["models/%s/README.md" % name] = vit_readme(name)
    # Benchmark nets (for strata estimate / strata time) of the zoo's VGG-16 and ViT-B/16 too.
    vgg, _ = vgg_body(VGG_CFGS["vgg16"])
    files["models/vgg16/benchmark.prototxt"] = benchmark_net(
        "vgg16", "vgg16 as torchvision's, trained on synthetic data: data + label -> fc8 -> loss", vgg, "fc8")
    vit, _ = vit_body(*VIT_SIZES["vit_b16"])
    files["models/vit_b16/benchmark.prototxt"] = benchmark_net(
        "vit_b16", "vit_b16 (ViT-B/16), trained on synthetic data: data + label -> head -> loss", vit, "head")
    for name, (what, fn, args, params, size, layers, relu, note) in ESTIMATE_MODELS.items():
        body, logits = (inception_v3_body() if name == "inception_v3" else resnet_body(RESNET_BLOCKS[name]))
        files["models/%s/benchmark.prototxt" % name] = benchmark_net(
            name, "%s as torchvision's %s (%s), trained on synthetic data: data + label -> fc -> loss" % (name, fn, what),
            body, logits, size=size)
        files["models/%s/README.md" % name] = ESTIMATE_README.format(
            name=name, fn=fn, what=what, args=args, params=params, size=size, layers=layers, relu=relu,
            note=note).replace("\n\n\n", "\n\n")
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if any file differs")
    args = ap.parse_args()
    stale = []
    for rel, text in sorted(model_files().items()):
        path = os.path.join(REPO, rel)
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        stale.append(rel)
        if not args.check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print("wrote", rel)
    if args.check and stale:
        print("out of date (run tools/make_model_prototxts.py):", " ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
