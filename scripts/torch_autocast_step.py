#!/usr/bin/env python3
"""PyTorch's training step in float32 or under CPU autocast (bfloat16), timed as
scripts/compare_precision.sh compares it with wick's `--precision`: SGD (lr 0.1,
momentum 0.9, weight decay 5e-4), cross-entropy, 10 classes, dropout off; the median of
`--reps` steps after `--warmup`. `--stem cifar` gives wick's CIFAR ResNet (a 3x3 stride-1
stem, no max pool). Prints one JSON line with "median_ms".

Usage: python3 scripts/torch_autocast_step.py --model resnet18 --stem cifar --batch 32
       --size 32 --precision bf16 [--threads 2] [--warmup 3] [--reps 10]
"""
import argparse
import json

import torch
import torchvision

from baseline_timing import add_timing_args, median_ms  # noqa: E402 (same folder)


def build(name, stem, size):
    if name.startswith("vit"):
        return getattr(torchvision.models, name)(num_classes=10, image_size=size, dropout=0.0)
    model = getattr(torchvision.models, name)(num_classes=10)
    if stem == "cifar":
        model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        model.maxpool = torch.nn.Identity()
    return model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=["resnet18", "resnet50", "vit_b_16"])
    p.add_argument("--stem", default="imagenet", choices=["imagenet", "cifar"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    add_timing_args(p)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = build(a.model, a.stem, a.size).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    median = median_ms(step, a.warmup, a.reps)
    print(json.dumps({"model": a.model, "batch": a.batch, "size": a.size, "threads": a.threads,
                      "precision": a.precision, "median_ms": median, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
