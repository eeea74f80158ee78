#!/usr/bin/env python3
"""PyTorch's reference for a non-square batch: fixtures/resnet18-nonsquare.

torchvision's resnet18(num_classes=10), ImageNet stem, weights by the formula of
fixtures/resnet18-formula/README.md; a batch of 4 images of 50x37 (width x height: odd
sizes, so every stride-2 layer rounds, and 37 != 50 on every layer). It records, in float32
and in float64 (from the same float32 weights and images):
- the eval() logits;
- one training step (train() forward, cross-entropy, backward, SGD lr 0.1, momentum 0.9,
  weight decay 5e-4 on every parameter): logits, loss, the L2 norm of every state entry's
  update (running statistics included) and the full update of a few small entries.

Usage: python3 scripts/make_nonsquare_fixture.py [OUT_DIR]  (needs torch, torchvision,
safetensors, numpy; default OUT_DIR fixtures/resnet18-nonsquare). Re-running it reproduces
the files bit for bit on a CPU.
"""
import os
import sys

import numpy as np
import torch
import torchvision
from safetensors.torch import save_file

from fixture_formula import set_weights, uniform  # same folder

BATCH, HEIGHT, WIDTH, CLASSES = 4, 37, 50, 10
SGD = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)
# Entries whose whole update is stored (the rest: the update's norm).
FULL = [
    "conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
    "layer2.0.downsample.0.weight", "layer4.1.bn2.weight", "layer4.1.bn2.bias",
    "layer4.1.bn2.running_var", "fc.weight", "fc.bias",
]


def model(dtype):
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=CLASSES)
    set_weights(m)
    return m.to(dtype)


def run(dtype):
    images = (2 * (2 * uniform("images", BATCH * 3 * HEIGHT * WIDTH) - 1)).astype(np.float32)
    images = torch.from_numpy(images.reshape(BATCH, 3, HEIGHT, WIDTH))
    labels = torch.from_numpy(np.floor(CLASSES * uniform("labels", BATCH)).astype(np.int64))
    x = images.to(dtype)
    out = {}
    m = model(dtype).eval()
    with torch.no_grad():
        out["logits_eval"] = m(x)
    m = model(dtype).train()
    before = {k: v.clone() for k, v in m.state_dict().items() if v.is_floating_point()}
    opt = torch.optim.SGD(m.parameters(), **SGD)
    logits = m(x)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    opt.step()
    out["logits_train"] = logits.detach()
    out["loss_train"] = loss.detach().reshape(1)
    for k, v in m.state_dict().items():
        if k in before:
            update = v.detach().double() - before[k].double()
            out[f"update1_norm.{k}"] = update.norm().reshape(1)
            if k in FULL:
                out[f"update1.{k}"] = update
    return images, labels, out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "fixtures/resnet18-nonsquare"
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    expected = {}
    for dtype, tag in [(torch.float32, "f32"), (torch.float64, "f64")]:
        images, labels, out = run(dtype)
        for k, v in out.items():
            head, _, tail = k.partition(".")
            name = f"{head}_{tag}" + (f".{tail}" if tail else "")
            expected[name] = v.to(torch.float64).contiguous()
    save_file({"images": images, "labels": labels}, os.path.join(out_dir, "batch.safetensors"))
    save_file(expected, os.path.join(out_dir, "expected.safetensors"))
    f32, f64 = expected["loss_train_f32"].item(), expected["loss_train_f64"].item()
    print(f"{out_dir}: {len(expected)} tensors; loss f32 {f32:.8f} f64 {f64:.8f}; "
          f"torch {torch.__version__}, torchvision {torchvision.__version__}")


if __name__ == "__main__":
    main()
