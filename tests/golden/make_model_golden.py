#!/usr/bin/env python3
"""Golden data for tests/model_golden_test.cpp: whole torchvision models against
strata nets loaded through the name maps of transfer/pretrained.h.

Writes tests/golden/models/:
  input.npy                       float32 [2, 3, 32, 32], shared by all models
  <model>.prototxt                the strata net (Input "data" [2, 3, 32, 32]), written with
                                  the functions of tools/make_model_prototxts.py that write
                                  models/, so the zoo and the goldens share one definition
  <model>.safetensors             torchvision's state dict, torchvision's names
  <model>_logits.npy              torchvision's output in eval mode
  <model>_embedding.npy           VGG: the fc7 activations (after ReLU; the classifier
                                  without its last Linear); ViT: pre_logits (the class token
                                  after the final LayerNorm)
  vit_tiny_timm.safetensors       the same ViT weights under timm's names
  vit_tiny_linear12.safetensors   ... and under torchvision's older mlp.linear_1/linear_2 names
Models:
  vgg_narrow      torchvision VGG(make_layers(CFG)) with a 12-wide classifier, 5 classes
  vgg_narrow_bn   the same with BatchNorm (random affine and running statistics)
  vit_tiny        torchvision VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                  num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=5)
All weights are random (every tensor redrawn so nothing is a trivial 0 or 1), eval
mode. Deterministic (seeded); committed files stay under 200 KB.

Usage:  /usr/bin/python3 tests/golden/make_model_golden.py
        (PyTorch 1.13 + torchvision 0.14: apt-get install python3-torchvision)
"""

import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
import torchvision
from torch import nn
from torchvision.models.vgg import VGG, make_layers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "models")
sys.path.insert(0, os.path.join(REPO, "tools"))
from make_model_prototxts import deploy_net, vgg_body, vit_body  # noqa: E402

VGG_CFG = [4, 4, "M", 8, "M", 4, "M"]  # three blocks: 32x32 -> 4x4, then adaptive 7x7
VGG_FC = 12
CLASSES = 5
VIT = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)
INPUT_SHAPE = (2, 3, 32, 32)
SIZE_LIMIT = 200 * 1024


def write_safetensors(path, tensors):
    """The safetensors format by hand: u64 LE header length, JSON header, raw data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy())
        dtype = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}[a.dtype]
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data buffer starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def save_npy(name, array):
    np.save(os.path.join(OUT, name), np.ascontiguousarray(array, dtype=np.float32))


def randomize(model, gen):
    """Redraws every parameter and buffer so that no value is a default 0 or 1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:  # norm weights
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.dim() > 1 else 1
                if "pos_embedding" in name or "class_token" in name:
                    fan_in = 4
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(fan_in))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
            elif name.endswith("num_batches_tracked"):
                b.fill_(1000)


def vgg_model(batch_norm, gen):
    model = VGG(make_layers(VGG_CFG, batch_norm=batch_norm), num_classes=CLASSES, init_weights=False)
    c = [v for v in VGG_CFG if v != "M"][-1]
    # torchvision's classifier layout (indices 0, 3, 6 are the Linears) at width VGG_FC.
    model.classifier = nn.Sequential(
        nn.Linear(c * 7 * 7, VGG_FC), nn.ReLU(True), nn.Dropout(),
        nn.Linear(VGG_FC, VGG_FC), nn.ReLU(True), nn.Dropout(),
        nn.Linear(VGG_FC, CLASSES))
    randomize(model, gen)
    return model.eval()


def vgg_embedding(model, x):
    h = torch.flatten(model.avgpool(model.features(x)), 1)
    return model.classifier[:-1](h)


def vit_model(gen):
    model = torchvision.models.VisionTransformer(num_classes=CLASSES, **VIT)
    randomize(model, gen)
    return model.eval()


def vit_embedding(model, x):
    h = model._process_input(x)
    h = torch.cat([model.class_token.expand(h.shape[0], -1, -1), h], dim=1)
    return model.encoder(h)[:, 0]


def timm_name(name):
    """torchvision ViT name -> timm's (the tensors are identical: timm's qkv is in_proj)."""
    fixed = {"conv_proj.weight": "patch_embed.proj.weight", "conv_proj.bias": "patch_embed.proj.bias",
             "class_token": "cls_token", "encoder.pos_embedding": "pos_embed",
             "encoder.ln.weight": "norm.weight", "encoder.ln.bias": "norm.bias",
             "heads.head.weight": "head.weight", "heads.head.bias": "head.bias"}
    if name in fixed:
        return fixed[name]
    prefix = "encoder.layers.encoder_layer_"
    assert name.startswith(prefix), name
    index, rest = name[len(prefix):].split(".", 1)
    parts = {"ln_1.": "norm1.", "ln_2.": "norm2.", "self_attention.in_proj_weight": "attn.qkv.weight",
             "self_attention.in_proj_bias": "attn.qkv.bias", "self_attention.out_proj.": "attn.proj.",
             "mlp.0.": "mlp.fc1.", "mlp.3.": "mlp.fc2."}
    for old, new in parts.items():
        if rest.startswith(old):
            return "blocks.%s.%s" % (index, new + rest[len(old):])
    raise KeyError(name)


def linear12_name(name):
    """torchvision ViT name -> the spelling of checkpoints saved before torchvision 0.13."""
    return name.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2.")


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(20240607)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    x = torch.randn(INPUT_SHAPE, generator=gen)
    save_npy("input.npy", x.numpy())

    for name, bn in (("vgg_narrow", False), ("vgg_narrow_bn", True)):
        model = vgg_model(bn, gen)
        with torch.no_grad():
            save_npy(name + "_logits.npy", model(x).numpy())
            save_npy(name + "_embedding.npy", vgg_embedding(model, x).numpy())
        write_safetensors(os.path.join(OUT, name + ".safetensors"), model.state_dict())
        body, _ = vgg_body(VGG_CFG, batch_norm=bn, num_classes=CLASSES, fc_dim=VGG_FC)
        with open(os.path.join(OUT, name + ".prototxt"), "w") as f:
            f.write(deploy_net(name, "golden: torchvision VGG, cfg %s%s, classifier width %d, %d classes"
                               % (VGG_CFG, " + BatchNorm" if bn else "", VGG_FC, CLASSES), body, INPUT_SHAPE))

    model = vit_model(gen)
    with torch.no_grad():
        save_npy("vit_tiny_logits.npy", model(x).numpy())
        save_npy("vit_tiny_embedding.npy", vit_embedding(model, x).numpy())
    state = model.state_dict()
    write_safetensors(os.path.join(OUT, "vit_tiny.safetensors"), state)
    write_safetensors(os.path.join(OUT, "vit_tiny_timm.safetensors"), {timm_name(k): v for k, v in state.items()})
    write_safetensors(os.path.join(OUT, "vit_tiny_linear12.safetensors"),
                      {linear12_name(k): v for k, v in state.items()})
    body, _ = vit_body(VIT["hidden_dim"], VIT["num_heads"], VIT["mlp_dim"], VIT["num_layers"],
                       patch=VIT["patch_size"], num_classes=CLASSES)
    with open(os.path.join(OUT, "vit_tiny.prototxt"), "w") as f:
        f.write(deploy_net("vit_tiny", "golden: torchvision VisionTransformer %s, %d classes" % (VIT, CLASSES),
                           body, INPUT_SHAPE))

    total = 0
    for f in sorted(os.listdir(OUT)):
        size = os.path.getsize(os.path.join(OUT, f))
        total += size
        print("wrote %-32s %7d bytes" % (f, size))
    print("total %d bytes" % total)
    if total > SIZE_LIMIT:
        print("FAIL: the golden files exceed %d bytes" % SIZE_LIMIT)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
