#!/usr/bin/python3
"""The PyTorch side of the `strata embed` benchmark: what torchvision users
write to embed a folder of images. An ImageFolder-style dataset (PIL decode,
convert("RGB")), the same transforms as strata's preset (imagenet: Resize 256
bilinear, CenterCrop 224, ToTensor, Normalize ImageNet; vit: Resize 248
bicubic, CenterCrop 224, mean/std 0.5), a DataLoader with worker processes,
and the model's forward up to the same blob (VGG-16: fc7 after ReLU; ViT-B/16:
the class token after the final LayerNorm). Prints one JSON line with the
images/s of the streaming loop (the first batch to the last row, model
construction excluded, as strata's progress line reports it).

  /usr/bin/python3 tools/bench/torch_embed.py --model vgg16 --images DIR --batch 8 --threads 2 --workers 1
"""
import argparse
import json
import os
import struct
import time

import torch
import torchvision
import torchvision.transforms as T
from PIL import Image


def write_safetensors(path, state_dict):
    """A float32 state dict as .safetensors (the format is small enough to write by hand)."""
    header, blobs, offset = {}, [], 0
    for name, t in state_dict.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Images(torch.utils.data.Dataset):
    def __init__(self, paths, transform):
        self.paths, self.transform = paths, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transform(img)


def build(model_name):
    torch.manual_seed(0)
    if model_name == "vgg16":
        m = torchvision.models.vgg16()
        m.classifier = m.classifier[:5]  # fc6 relu6 drop6 fc7 relu7 -> strata's blob fc7
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    elif model_name == "vit_b16":
        m = torchvision.models.vit_b_16()
        m.heads = torch.nn.Identity()  # class token after encoder.ln -> strata's blob pre_logits
        tf = T.Compose([T.Resize(248, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224),
                        T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)])
    else:
        raise SystemExit(f"unknown model {model_name}")
    return m.eval(), tf


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--save-weights", help="write the model's state dict as safetensors and exit")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model, tf = build(a.model)
    if a.save_weights:
        torch.manual_seed(0)
        full = torchvision.models.vgg16() if a.model == "vgg16" else torchvision.models.vit_b_16()
        write_safetensors(a.save_weights, full.state_dict())
        return
    paths = sorted(os.path.join(a.images, f) for f in os.listdir(a.images) if f.endswith(".jpg"))
    loader = torch.utils.data.DataLoader(Images(paths, tf), batch_size=a.batch, num_workers=a.workers,
                                         shuffle=False)
    rows = []
    start = time.perf_counter()
    with torch.inference_mode():
        for x in loader:
            rows.append(model(x))
    secs = time.perf_counter() - start
    out = torch.cat(rows)
    print(json.dumps({"images": len(paths), "seconds": secs, "images_per_s": len(paths) / secs,
                      "dim": out.shape[1]}))


if __name__ == "__main__":
    main()
