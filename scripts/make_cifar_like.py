#!/usr/bin/env python3
"""Writes a learnable dataset in CIFAR-10's binary format, for trying train_resnet's real
loader (epochs, augmentation, full test-set evaluation) where CIFAR-10 itself is not at
hand. Each class has its own colour tint and a bright 8x8 square at its own place, under
noise; the files are data_batch_1..5.bin and test_batch.bin.

    python3 scripts/make_cifar_like.py OUT_DIR [--train-per-file N] [--test N] [--seed S]
"""
import argparse
import os
import random


def image(label, rng):
    gy, gx = divmod(label, 4)
    y0, x0 = 2 + gy * 10, 2 + gx * 7
    out = bytearray()
    for c in range(3):
        tint = 60 + ((label * 3 + c) % 5) * 30
        for y in range(32):
            for x in range(32):
                v = tint + rng.gauss(0, 40)
                if y0 <= y < y0 + 8 and x0 <= x < x0 + 8:
                    v += 90
                out.append(max(0, min(255, int(v))))
    return bytes(out)


def write(path, count, rng):
    with open(path + ".tmp", "wb") as f:
        for i in range(count):
            label = rng.randrange(10)
            f.write(bytes([label]) + image(label, rng))
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--train-per-file", type=int, default=400)
    p.add_argument("--test", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    for i in range(1, 6):
        write(os.path.join(a.out, f"data_batch_{i}.bin"), a.train_per_file, rng)
    write(os.path.join(a.out, "test_batch.bin"), a.test, rng)
    print(f"wrote {5 * a.train_per_file} training and {a.test} test images to {a.out}")


if __name__ == "__main__":
    main()
