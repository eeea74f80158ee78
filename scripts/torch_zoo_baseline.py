#!/usr/bin/env python3
"""PyTorch's training step for a torchvision zoo model, timed as
scripts/compare_pytorch.sh compares it with wick's: SGD (lr 0.1, momentum 0.9, weight
decay 5e-4), cross-entropy, 10 classes, dropout and stochastic depth off; the median of
`--reps` steps after `--warmup`. Prints one JSON line with "median_ms".

Usage: python3 scripts/torch_zoo_baseline.py --model mobilenet_v2 [--batch 8] [--size 128]
       [--threads 2] [--warmup 3] [--reps 10]
"""
import argparse
import json

import torch
import torchvision

from baseline_timing import add_timing_args, median_ms  # noqa: E402 (same folder)

# Dropout and stochastic depth off, as the fixtures build them.
from make_zoo_fixtures import MODELS as OFF  # noqa: E402 (same folder)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=sorted(OFF))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=128)
    add_timing_args(p)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    settings = dict(OFF[a.model])
    if "image_size" in settings:  # a ViT is built for the size it runs
        settings["image_size"] = a.size
    model = getattr(torchvision.models, a.model)(num_classes=10, **settings).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    median = median_ms(step, a.warmup, a.reps)
    print(json.dumps({"model": a.model, "batch": a.batch, "size": a.size, "threads": a.threads,
                      "median_ms": median, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
