#!/usr/bin/env python3
"""Writes a real small dataset in CIFAR-10's binary format: the UCI handwritten digits
(scikit-learn's `load_digits`, shipped inside the package: 1,797 scans of 8x8 pixels at
17 grey levels, 10 classes). Each image is scaled to 32x32 (bilinear, torch's
`interpolate` with `align_corners=False`) and to 0-255, the same in all three channels.
A fixed shuffle (seed 0) holds out 297 images as `test_batch.bin`; the other 1,500 fill
`data_batch_1..5.bin` (300 each), so `train_resnet --data-dir` reads it like CIFAR-10.

    python3 scripts/make_digits.py OUT_DIR   (needs scikit-learn, torch, numpy)
"""
import os
import sys

import numpy as np
import torch
from sklearn.datasets import load_digits

TEST, PER_FILE = 297, 300


def records(images, labels):
    x = torch.from_numpy(images).float().unsqueeze(1) / 16.0
    x = torch.nn.functional.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    pixels = (x.clamp(0, 1) * 255).round().to(torch.uint8).repeat(1, 3, 1, 1).numpy()
    return b"".join(bytes([int(l)]) + p.tobytes() for l, p in zip(labels, pixels))


def write(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    images, labels = d.images[order], d.target[order]
    write(os.path.join(out, "test_batch.bin"), records(images[:TEST], labels[:TEST]))
    for i in range(5):
        lo = TEST + i * PER_FILE
        chunk = slice(lo, lo + PER_FILE)
        write(os.path.join(out, f"data_batch_{i + 1}.bin"), records(images[chunk], labels[chunk]))
    print(f"wrote {len(labels) - TEST} training and {TEST} test digits to {out}")


if __name__ == "__main__":
    main()
