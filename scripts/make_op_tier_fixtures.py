#!/usr/bin/env python3
"""PyTorch references for wick's second op tier: fixtures/ops-tier.

One <case>.safetensors per case, in the format of fixtures/ops (see its README): the op's
inputs, `out`, a random `grad_out` of out's shape, and `grad_<input>` = d sum(out *
grad_out) / d input for each input listed in the metadata's `inputs`. float64 unless the
case says otherwise; torch.manual_seed(k) for case k; one thread, deterministic algorithms.

Usage: python3 scripts/make_op_tier_fixtures.py [OUT_DIR]  (needs torch, safetensors;
default OUT_DIR fixtures/ops-tier). Re-running it reproduces every tensor and metadata value bit for bit on a CPU (the
header's key order may change).
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
OUT = sys.argv[1] if len(sys.argv) > 1 else "fixtures/ops-tier"
os.makedirs(OUT, exist_ok=True)
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def save(name, seed, inputs, out, meta, dtype=torch.float64):
    """Differentiates sum(out * grad_out) for every input in `inputs` (a dict of leaf
    tensors requiring grad, or plain tensors) and writes the case."""
    grad_out = torch.randn(out.shape, dtype=dtype)
    with_grad = [k for k, v in inputs.items() if v.requires_grad]
    grads = torch.autograd.grad((out * grad_out).sum(), [inputs[k] for k in with_grad]) if with_grad else []
    tensors = {k: v.detach().contiguous() for k, v in inputs.items()}
    tensors["out"] = out.detach().clone().contiguous()
    tensors["grad_out"] = grad_out.contiguous()
    for k, g in zip(with_grad, grads):
        tensors[f"grad_{k}"] = g.clone().contiguous()
    meta = {k: str(v) for k, v in meta.items()}
    meta.update(case=name, seed=str(seed), torch=torch.__version__, inputs=",".join(with_grad),
                dtype=str(dtype).replace("torch.", ""))
    save_file(tensors, os.path.join(OUT, f"{name}.safetensors"), metadata=meta)


def leaf(t):
    return t.clone().requires_grad_(True)


ACTIVATIONS = {
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
}


@case
def activations(seed=1):
    # Random values, spread to reach every piece, plus the kinks exactly.
    for i, (name, f) in enumerate(ACTIVATIONS.items()):
        torch.manual_seed(seed * 100 + i)
        x = torch.randn(2, 3, 4, 5, dtype=torch.float64) * 4
        kinks = torch.tensor([-6.0, -3.0, 0.0, 3.0, 6.0, 1e-3, -1e-3, 7.5], dtype=torch.float64)
        x.view(-1)[: kinks.numel()] = kinks
        x = leaf(x)
        meta = {"op": name}
        if name == "leaky_relu":
            meta["slope"] = 0.2
        save(f"act_{name}", seed * 100 + i, {"x": x}, f(x), meta)


@case
def binary(seed=2):
    shapes = {
        "same": ([2, 3, 4, 4], [2, 3, 4, 4]),
        "se": ([2, 3, 4, 4], [2, 3, 1, 1]),  # squeeze-excitation
        "layer_scale": ([2, 3, 4, 4], [3, 1, 1]),
        "row": ([1, 4], [3, 1]),
    }
    ops = {"mul": torch.mul, "sub": torch.sub, "div": torch.div, "add": torch.add}
    k = 0
    for op, f in ops.items():
        for sname, (sa, sb) in shapes.items():
            torch.manual_seed(seed * 100 + k)
            a = leaf(torch.randn(sa, dtype=torch.float64))
            b = torch.randn(sb, dtype=torch.float64)
            if op == "div":
                b = b.sign() * (b.abs() + 0.5)  # away from 0
            b = leaf(b)
            save(f"binary_{op}_{sname}", seed * 100 + k, {"a": a, "b": b}, f(a, b), {"op": op})
            k += 1


@case
def norms(seed=3):
    torch.manual_seed(seed)
    x = leaf(torch.randn(2, 3, 4, 6, dtype=torch.float64) * 2 + 1)
    w = leaf(torch.randn(6, dtype=torch.float64))
    b = leaf(torch.randn(6, dtype=torch.float64))
    save("layer_norm", seed, {"x": x, "weight": w, "bias": b}, F.layer_norm(x, [6], w, b, 1e-6), {"op": "layer_norm", "eps": 1e-6})
    x = leaf(torch.randn(2, 6, 3, 5, dtype=torch.float64) * 3 - 1)
    w = leaf(torch.randn(6, dtype=torch.float64))
    b = leaf(torch.randn(6, dtype=torch.float64))
    save("group_norm", seed, {"x": x, "weight": w, "bias": b}, F.group_norm(x, 3, w, b, 1e-5), {"op": "group_norm", "groups": 3, "eps": 1e-5})
    x = leaf(torch.randn(3, 5, 4, dtype=torch.float64) * 3)
    save("softmax_dim1", seed, {"x": x}, torch.softmax(x, 1), {"op": "softmax", "dim": 1})


@case
def rms_norm(seed=7):
    """nn.RMSNorm's functional form: with a weight and eps, and with neither (eps=None is
    float64's machine epsilon)."""
    torch.manual_seed(seed)
    x = leaf(torch.randn(2, 3, 4, 6, dtype=torch.float64) * 2 + 1)
    w = leaf(torch.randn(6, dtype=torch.float64))
    save("rms_norm", seed, {"x": x, "weight": w}, F.rms_norm(x, [6], w, 1e-6), {"op": "rms_norm", "eps": 1e-6})
    x = leaf(torch.randn(5, 7, dtype=torch.float64) * 0.5 - 0.25)
    save("rms_norm_default_eps", seed, {"x": x}, F.rms_norm(x, [7]), {"op": "rms_norm", "eps": torch.finfo(x.dtype).eps})


@case
def losses(seed=4):
    torch.manual_seed(seed)
    x = leaf(torch.randn(4, 3, dtype=torch.float64) * 3)
    t = leaf(torch.randn(4, 3, dtype=torch.float64))
    save("mse_loss", seed, {"input": x, "target": t}, F.mse_loss(x, t), {"op": "mse_loss"})
    x = leaf(torch.randn(4, 3, dtype=torch.float64) * 5)
    t = leaf(torch.rand(4, 3, dtype=torch.float64))
    save("bce_with_logits", seed, {"input": x, "target": t}, F.binary_cross_entropy_with_logits(x, t), {"op": "bce_with_logits"})


@case
def decoder(seed=6):
    """Upsampling (nearest, bilinear with align_corners=False) to a non-integer scale, and a
    transposed convolution with stride, padding, output padding, groups and a bias."""
    torch.manual_seed(seed)
    x = leaf(torch.randn(2, 3, 5, 7, dtype=torch.float64))
    save("upsample_nearest", seed, {"x": x}, F.interpolate(x, size=(9, 12), mode="nearest"),
         {"op": "upsample", "mode": "nearest", "out_h": 9, "out_w": 12})
    x = leaf(torch.randn(2, 3, 5, 7, dtype=torch.float64))
    save("upsample_bilinear", seed, {"x": x},
         F.interpolate(x, size=(9, 12), mode="bilinear", align_corners=False),
         {"op": "upsample", "mode": "bilinear", "out_h": 9, "out_w": 12})
    x = leaf(torch.randn(2, 4, 5, 6, dtype=torch.float64))
    w = leaf(torch.randn(4, 3, 3, 3, dtype=torch.float64))
    b = leaf(torch.randn(6, dtype=torch.float64))
    out = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)
    save("conv_transpose2d", seed, {"x": x, "weight": w, "bias": b}, out,
         {"op": "conv_transpose2d", "stride": 2, "padding": 1, "output_padding": 1, "groups": 2})


@case
def adam(seed=5):
    """torch.optim.Adam / AdamW (float32, single-tensor path), 3 steps, after clipping
    every step's gradients to a global norm of 1 (clip_grad_norm_)."""
    for k, (name, cls, wd) in enumerate([("adam", torch.optim.Adam, 0.01), ("adamw", torch.optim.AdamW, 0.05)]):
        torch.manual_seed(seed * 10 + k)
        p = torch.randn(4, 3, dtype=torch.float32)
        q = torch.randn(5, dtype=torch.float32)
        params = [p.clone().requires_grad_(True), q.clone().requires_grad_(True)]
        opt = cls(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd, foreach=False)
        tensors = {"p_before": p, "q_before": q}
        for step in range(3):
            gp = torch.randn(4, 3, dtype=torch.float32)
            gq = torch.randn(5, dtype=torch.float32) * 0.5
            tensors[f"grad_p_step{step}"] = gp.clone()
            tensors[f"grad_q_step{step}"] = gq.clone()
            params[0].grad = gp.clone()
            params[1].grad = gq.clone()
            norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
            tensors[f"norm_step{step}"] = norm.detach().reshape(())
            opt.step()
            tensors[f"p_after_step{step + 1}"] = params[0].detach().clone()
            tensors[f"q_after_step{step + 1}"] = params[1].detach().clone()
            tensors[f"p_exp_avg_after_step{step + 1}"] = opt.state[params[0]]["exp_avg"].clone()
            tensors[f"p_exp_avg_sq_after_step{step + 1}"] = opt.state[params[0]]["exp_avg_sq"].clone()
        meta = dict(op=name, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=wd, max_norm=1.0, steps=3,
                    case=name, seed=seed * 10 + k, torch=torch.__version__, dtype="float32")
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(OUT, f"{name}_clipped.safetensors"),
                  metadata={k: str(v) for k, v in meta.items()})


for c in CASES:
    c()
print(f"wrote {len(os.listdir(OUT))} files to {OUT}")
