#!/usr/bin/env python3
"""PyTorch's CPU autocast over 20 training steps: fixtures/autocast/<model>.safetensors.

Two models, each with the fixture formula's weights (fixtures/resnet18-formula/README.md)
and one formula batch ("images", "labels" streams) used at every step:
- resnet18: torchvision's resnet18(num_classes=10) with the CIFAR stem (3x3 conv1, no
  max-pool), 8 images of 32x32;
- vit_ti_16: torchvision's VisionTransformer at ViT-Ti/16's sizes (DeiT-Ti, timm's
  vit_tiny_patch16_224: 12 layers, 3 heads, width 192, MLP 768), image_size 64, 4 images.

Each model trains for STEPS steps of SGD (lr 0.02, momentum 0.9, weight decay 5e-4) four
ways from the same float32 weights: float32 (`_f32`), float64 (`_f64`, the reference),
float32 under `torch.autocast("cpu", dtype=torch.bfloat16)` around the forward and the loss
(`_bf16`, PyTorch's mixed precision: bf16 products and activations, float32 weights), and
the same with `dtype=torch.float16` and `torch.amp.GradScaler("cpu")` at its defaults
(`_f16`: scaled loss, unscaled gradients, skipped steps on infinities).

Stored (float64 values):
- losses_* [STEPS]: each step's loss;
- update_norm_*.<name>: the L2 norm of each floating-point state entry's change over all
  the steps (running statistics included);
- scale_f16 [1] and skipped_f16 [1]: the f16 run's final loss scale and its skipped steps;
- images_sum [1]: the batch's sum, to check that both sides made the same batch.

Usage: python3 scripts/make_autocast_fixtures.py [OUT_DIR] [MODEL...]  (needs torch,
torchvision, safetensors, numpy; default OUT_DIR fixtures/autocast, both models).
"""
import os
import sys

import numpy as np
import torch
import torchvision
from safetensors.torch import save_file

from fixture_formula import set_weights, uniform  # same folder

STEPS, CLASSES = 20, 10
SGD = dict(lr=0.02, momentum=0.9, weight_decay=5e-4)


def resnet18():
    m = torchvision.models.resnet18(num_classes=CLASSES)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = torch.nn.Identity()
    return m


def vit_ti_16():
    return torchvision.models.VisionTransformer(
        image_size=64, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192,
        mlp_dim=768, num_classes=CLASSES)


MODELS = {"resnet18": (resnet18, 8, 32), "vit_ti_16": (vit_ti_16, 4, 64)}


def batch(n, size):
    images = (2 * (2 * uniform("images", n * 3 * size * size) - 1)).astype(np.float32)
    images = torch.from_numpy(images.reshape(n, 3, size, size))
    labels = torch.from_numpy(np.floor(CLASSES * uniform("labels", n)).astype(np.int64))
    return images, labels


def run(name, dtype, autocast):
    """`autocast`: None, torch.bfloat16 or torch.float16 (with a GradScaler)."""
    build, n, size = MODELS[name]
    torch.manual_seed(0)
    m = build()
    set_weights(m)
    m = m.to(dtype).train()
    images, labels = batch(n, size)
    x = images.to(dtype)
    before = {k: v.clone() for k, v in m.state_dict().items() if v.is_floating_point()}
    opt = torch.optim.SGD(m.parameters(), **SGD)
    scaler = torch.amp.GradScaler("cpu", enabled=autocast == torch.float16)
    losses, skipped = [], 0
    for _ in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = torch.nn.functional.cross_entropy(m(x), labels)
        scaler.scale(loss).backward()
        before_scale = scaler.get_scale() if scaler.is_enabled() else 1.0
        scaler.step(opt)
        scaler.update()
        if scaler.is_enabled() and scaler.get_scale() < before_scale:
            skipped += 1
        losses.append(loss.item())
    out = {"losses": torch.tensor(losses, dtype=torch.float64)}
    if scaler.is_enabled():
        out["scale"] = torch.tensor([scaler.get_scale()], dtype=torch.float64)
        out["skipped"] = torch.tensor([float(skipped)], dtype=torch.float64)
    for k, v in m.state_dict().items():
        if k in before:
            out[f"update_norm.{k}"] = (v.double() - before[k].double()).norm().reshape(1)
    return images, out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "fixtures/autocast"
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(2)
    for name in names:
        expected = {}
        for dtype, autocast, tag in [(torch.float32, None, "f32"), (torch.float64, None, "f64"),
                                     (torch.float32, torch.bfloat16, "bf16"),
                                     (torch.float32, torch.float16, "f16")]:
            images, out = run(name, dtype, autocast)
            for k, v in out.items():
                head, _, tail = k.partition(".")
                expected[f"{head}_{tag}" + (f".{tail}" if tail else "")] = v.contiguous()
        expected["images_sum"] = images.double().sum().reshape(1)
        meta = dict(model=name, torch=torch.__version__, torchvision=torchvision.__version__,
                    steps=str(STEPS), batch=str(images.shape[0]), size=str(images.shape[2]))
        save_file(expected, os.path.join(out_dir, f"{name}.safetensors"), metadata=meta)
        f64 = expected["losses_f64"]
        print(f"{name}: {len(expected)} tensors; loss {f64[0]:.4f} -> {f64[-1]:.4f}; "
              f"max |loss - f64|: f32 {(expected['losses_f32'] - f64).abs().max():.1e}, "
              f"bf16 {(expected['losses_bf16'] - f64).abs().max():.1e}, "
              f"f16 {(expected['losses_f16'] - f64).abs().max():.1e} "
              f"(scale {expected['scale_f16'].item():g}, {expected['skipped_f16'].item():g} skipped)")


if __name__ == "__main__":
    main()
