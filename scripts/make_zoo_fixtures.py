#!/usr/bin/env python3
"""PyTorch's reference for every zoo model: fixtures/zoo/<model>.safetensors.

Each torchvision model is built with num_classes=10, dropout 0 and stochastic depth 0 (a
deterministic step), and its weights are set by the fixture formula of
fixtures/resnet18-formula/README.md, extended by module type: a convolution or linear
weight is `s * sqrt(3 / fan_in)`, its bias `s * sqrt(3 / out)`; a normalisation weight
`1 + 0.1 s` and bias `0.1 s`; running means `0.1 s`, variances `0.5 + u`; ConvNeXt's
layer scale `0.1 s` (u from the tensor's name, s = 2u - 1). The batch is the formula's:
4 images of 50x37 (width x height; 32x32 for the ViT, built for one square size) from
the "images" stream and labels from "labels".

Stored (float64 values; `_f32` is PyTorch float32, `_f64` the same computation in float64
from the same float32 weights and images):
- logits_eval_*: eval() logits [4, 10];
- loss_train_*: the train() forward's cross-entropy [1];
- update1_norm_*.<name>: the L2 norm of each floating-point state entry's change after one
  SGD step (lr 0.1, momentum 0.9, weight decay 5e-4; running statistics included);
- images_sum [1]: the batch's sum, to check that both sides made the same batch.

Usage: python3 scripts/make_zoo_fixtures.py [OUT_DIR] [MODEL...]  (needs torch,
torchvision, safetensors, numpy; default OUT_DIR fixtures/zoo, every model).
"""
import os
import sys

import numpy as np
import torch
import torchvision

from fixture_formula import set_weights, uniform  # same folder

BATCH, HEIGHT, WIDTH, CLASSES = 4, 37, 50, 10
SGD = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)
MODELS = {
    "mobilenet_v2": dict(dropout=0.0),
    "mobilenet_v3_small": dict(dropout=0.0),
    "mobilenet_v3_large": dict(dropout=0.0),
    "efficientnet_b0": dict(dropout=0.0, stochastic_depth_prob=0.0),
    "densenet121": dict(),
    "convnext_tiny": dict(stochastic_depth_prob=0.0),
    "vgg11_bn": dict(dropout=0.0),
    "vgg16_bn": dict(dropout=0.0),
    "vit_b_16": dict(image_size=32),
}
# A ViT is built for one square size: 32x32 (two by two 16x16 patches and the class token).
SIZES = {"vit_b_16": (32, 32)}


def model(name, dtype):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(num_classes=CLASSES, **MODELS[name])
    set_weights(m)
    return m.to(dtype)


def batch(name):
    height, width = SIZES.get(name, (HEIGHT, WIDTH))
    images = (2 * (2 * uniform("images", BATCH * 3 * height * width) - 1)).astype(np.float32)
    images = torch.from_numpy(images.reshape(BATCH, 3, height, width))
    labels = torch.from_numpy(np.floor(CLASSES * uniform("labels", BATCH)).astype(np.int64))
    return images, labels


def run(name, dtype):
    images, labels = batch(name)
    x = images.to(dtype)
    out = {}
    m = model(name, dtype).eval()
    with torch.no_grad():
        out["logits_eval"] = m(x)
    m = model(name, dtype).train()
    before = {k: v.clone() for k, v in m.state_dict().items() if v.is_floating_point()}
    opt = torch.optim.SGD(m.parameters(), **SGD)
    loss = torch.nn.functional.cross_entropy(m(x), labels)
    loss.backward()
    opt.step()
    out["loss_train"] = loss.detach().reshape(1)
    for k, v in m.state_dict().items():
        if k in before:
            out[f"update1_norm.{k}"] = (v.detach().double() - before[k].double()).norm().reshape(1)
    return images, out


def main():
    # Imported here: scripts/torch_zoo_baseline.py imports MODELS and writes no file.
    from safetensors.torch import save_file

    out_dir = sys.argv[1] if len(sys.argv) > 1 else "fixtures/zoo"
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    for name in names:
        expected = {}
        for dtype, tag in [(torch.float32, "f32"), (torch.float64, "f64")]:
            images, out = run(name, dtype)
            for k, v in out.items():
                head, _, tail = k.partition(".")
                expected[f"{head}_{tag}" + (f".{tail}" if tail else "")] = v.to(torch.float64).contiguous()
        expected["images_sum"] = images.double().sum().reshape(1)
        meta = dict(model=name, torch=torch.__version__, torchvision=torchvision.__version__,
                    batch=str(BATCH), height=str(images.shape[2]), width=str(images.shape[3]),
                    classes=str(CLASSES))
        save_file(expected, os.path.join(out_dir, f"{name}.safetensors"), metadata=meta)
        rel = lambda a, b: ((a - b).abs().max() / b.abs().max()).item()
        print(f"{name}: {len(expected)} tensors; loss f32 {expected['loss_train_f32'].item():.6f}; "
              f"PyTorch f32 vs f64: logits {rel(expected['logits_eval_f32'], expected['logits_eval_f64']):.1e}")


if __name__ == "__main__":
    main()
