#!/usr/bin/env python3
"""torchvision's input pipeline on an ImageFolder, as examples/loader_bench measures wick's:
ImageFolder (PIL's loader), RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(),
Normalize(ImageNet), a DataLoader with num_workers loader processes (0: the main process),
shuffled, batch_size images a batch. One untimed batch per worker, then `batches` timed.

Usage: torch_loader_baseline.py DATA_DIR [--image-size 224] [--batch-size 32]
       [--num-workers 1] [--batches 20]   (needs torch, torchvision, pillow)
"""
import argparse
import os
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

p = argparse.ArgumentParser()
p.add_argument("data_dir")
p.add_argument("--image-size", type=int, default=224)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--num-workers", type=int, default=1)
p.add_argument("--batches", type=int, default=20)
a = p.parse_args()
torch.set_num_threads(1)
root = os.path.join(a.data_dir, "train") if os.path.isdir(os.path.join(a.data_dir, "train")) else a.data_dir
ds = ImageFolder(
    root,
    T.Compose([
        T.RandomResizedCrop(a.image_size),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]),
)
loader = torch.utils.data.DataLoader(
    ds, batch_size=a.batch_size, shuffle=True, num_workers=a.num_workers, drop_last=True,
    persistent_workers=a.num_workers > 0, prefetch_factor=2 if a.num_workers > 0 else None,
)


def batches():
    while True:
        yield from loader


it = batches()
for _ in range(max(a.num_workers, 1)):
    next(it)
start = time.perf_counter()
for _ in range(a.batches):
    next(it)
secs = time.perf_counter() - start
images = a.batches * a.batch_size
threads = max(a.num_workers, 1)
print(f"torchvision: {images / secs:.1f} images/s with {a.num_workers} workers "
      f"({images / secs / threads:.1f} per worker), {a.batches} batches of {a.batch_size} at {a.image_size}")
