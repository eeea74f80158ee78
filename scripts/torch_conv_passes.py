#!/usr/bin/env python3
"""PyTorch's side of scripts/compare_conv_passes.sh: every distinct convolution of a
torchvision model (`--model resnet18-cifar`: ResNet-18 with wick's CIFAR stem), its
forward, input gradient and weight gradient timed alone as medians, in float32 or bfloat16
(the dtypes CPU autocast gives a convolution: both operands bf16). Prints the lines
`benches/conv_passes.rs` prints (a grouped convolution's channels end in `g<groups>`):

  conv 64->64 3x3 s1 @32 count 4 forward 5.8 input_grad 5.9 weight_grad 7.4   (ms)

Usage: python3 scripts/torch_conv_passes.py [--precision bf16] [--model resnet18-cifar|NAME]
       [--image N] [--batch 32] [--threads 2] [--warmup 3] [--reps 10]
(NAME: a torchvision model that wick's registry has, such as resnet50 or mobilenet_v2, at
--image pixels, default 224; 32 for resnet18-cifar.)
"""
import argparse

import torch

from baseline_timing import add_timing_args, median_ms  # noqa: E402 (same folder)
from torch_autocast_step import build  # noqa: E402


def distinct_convs(model, x):
    """(input shape, conv module, count) of each distinct convolution, in network order."""
    seen = {}
    hooks = [m.register_forward_hook(lambda m, i, o: record(m, i[0].shape))
             for m in model.modules() if isinstance(m, torch.nn.Conv2d)]

    def record(m, shape):
        key = (tuple(shape), tuple(m.weight.shape), m.stride, m.padding, m.dilation, m.groups)
        if key in seen:
            seen[key][2] += 1
        else:
            seen[key] = [tuple(shape), m, 1]

    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return list(seen.values())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    p.add_argument("--model", default="resnet18-cifar")
    p.add_argument("--image", type=int)
    p.add_argument("--batch", type=int, default=32)
    add_timing_args(p)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model == "resnet18-cifar":
        name, stem, size = "resnet18", "cifar", 32
    else:
        name, stem, size = a.model, "imagenet", 224
    size = a.image or size
    model = build(name, stem, size).eval()
    dt = torch.bfloat16 if a.precision == "bf16" else torch.float32
    for shape, m, count in distinct_convs(model, torch.randn(a.batch, 3, size, size)):
        x = torch.randn(shape).to(dt)
        w = (torch.randn(m.weight.shape) * 0.05).to(dt)
        s, pad, dil, groups = list(m.stride), list(m.padding), list(m.dilation), m.groups

        def forward():
            return torch.nn.functional.conv2d(x, w, None, s, pad, dil, groups)
        gy = torch.randn_like(forward())

        def backward(mask):
            return lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, s, pad, dil, False, [0, 0], groups, mask)

        with torch.no_grad():
            def timed(f):
                return median_ms(f, a.warmup, a.reps)
            fwd = timed(forward)
            data = 0.0 if shape[1] == 3 else timed(backward([True, False, False]))
            weight = timed(backward([False, True, False]))
        k = m.weight.shape[2]
        g = f"g{groups}" if groups > 1 else ""
        print(f"conv {shape[1]}->{m.weight.shape[0]}{g} {k}x{k} s{s[0]} @{shape[2]} count {count} "
              f"forward {fwd:.3f} input_grad {data:.3f} weight_grad {weight:.3f}", flush=True)


if __name__ == "__main__":
    main()
