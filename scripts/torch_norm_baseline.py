#!/usr/bin/env python3
"""PyTorch's CPU layer norm and RMS norm beside `cargo bench --bench transformer_layers --
norm`: the same shapes (a GPT-2 block's rows at batch 4, context 256, 768 wide, and 4096
wide), forward alone and forward + backward, medians of 30 after 3 warm-ups, 2 threads.

Usage: python3 scripts/torch_norm_baseline.py (needs torch).
"""
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)


def median_ms(f, n=30):
    for _ in range(3):
        f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e3


for rows, d in [(1024, 768), (1024, 4096)]:
    x, w, b, gy = torch.randn(rows, d), torch.randn(d), torch.randn(d), torch.randn(rows, d)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    with torch.no_grad():
        ln = median_ms(lambda: F.layer_norm(x, [d], w, b, 1e-5))
        rms = median_ms(lambda: F.rms_norm(x, [d], w, 1e-6))
    ln_both = median_ms(lambda: torch.autograd.grad(F.layer_norm(xr, [d], wr, br, 1e-5), [xr, wr, br], gy))
    rms_both = median_ms(lambda: torch.autograd.grad(F.rms_norm(xr, [d], wr, 1e-6), [xr, wr], gy))
    print(f"{rows}x{d}: layer_norm forward {ln:.3f} ms, forward + backward {ln_both:.3f} ms; "
          f"rms_norm forward {rms:.3f} ms, forward + backward {rms_both:.3f} ms")
