#!/usr/bin/env python3
"""PyTorch references for wick's tensor language: fixtures/tensor-ops.

One <case>.safetensors per case: the op's inputs, `out`, a random `grad_out` of out's
shape, and `grad_<input>` = d sum(out * grad_out) / d input for each float input (every
float input is differentiated). Float64; integer inputs are int64 and masks uint8. The
metadata gives the case, the seed, torch's version and `torch_f32_err`: PyTorch's own
float32 result on the same inputs, as max |f32 - f64| / max |f64| over the output and
every gradient (what float32 can be expected to reach). torch.manual_seed(k) for case k;
one thread, deterministic algorithms.

The Rust side (crates/graph/tests/tensor_ops/; `mha_causal`, `lstm_*` and `gru_*`:
crates/models/tests/attention_pytorch.rs and recurrent_pytorch.rs, through `Layers`) builds each case from builder calls by
its name, checks it against these values in float64 and float32, and against finite
differences.

Usage: python3 scripts/make_tensor_op_fixtures.py [OUT_DIR]  (needs torch, safetensors;
default OUT_DIR fixtures/tensor-ops). Re-running it on one machine reproduces every tensor and metadata value bit
for bit (only the header's key order may change); on another CPU a few float64 values may
differ in their last bit, where the BLAS takes another path.
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
OUT = sys.argv[1] if len(sys.argv) > 1 else "fixtures/tensor-ops"
os.makedirs(OUT, exist_ok=True)
SEED = [0]


def run(fn, inputs, dtype):
    """fn's output and the gradients of sum(out * grad_out) for every float input."""
    leaves = {}
    for k, v in inputs.items():
        if v.is_floating_point():
            leaves[k] = v.to(dtype).clone().requires_grad_(True)
        else:
            leaves[k] = v.clone()
    out = fn(**leaves)
    return leaves, out


def case(name, fn, **inputs):
    SEED[0] += 1
    torch.manual_seed(SEED[0])
    leaves, out = run(fn, inputs, torch.float64)
    floats = [k for k, v in leaves.items() if v.is_floating_point()]
    tensors = {k: v.detach().contiguous() for k, v in leaves.items()}
    if out.dtype == torch.bool:
        out = out.to(torch.uint8)
    tensors["out"] = out.detach().clone().contiguous()
    grads = {}
    if out.is_floating_point() and out.requires_grad:
        grad_out = torch.randn(out.shape, dtype=torch.float64)
        tensors["grad_out"] = grad_out
        gs = torch.autograd.grad((out * grad_out).sum(), [leaves[k] for k in floats], allow_unused=True)
        for k, g in zip(floats, gs):
            g = torch.zeros_like(leaves[k]) if g is None else g
            grads[k] = g
            tensors[f"grad_{k}"] = g.detach().clone().contiguous()
    # PyTorch's float32 on the same inputs, against its float64.
    leaves32, out32 = run(fn, inputs, torch.float32)
    err = 0.0
    if out.is_floating_point():
        pairs = [(out32, out)]
        if grads:
            floats32 = [leaves32[k] for k in floats]
            gs32 = torch.autograd.grad((out32 * tensors["grad_out"].float()).sum(), floats32, allow_unused=True)
            pairs += [(g32, grads[k]) for k, g32 in zip(floats, gs32) if g32 is not None]
        for a, b in pairs:
            b = b.detach()
            finite = torch.isfinite(b)
            scale = b[finite].abs().max().item() if finite.any() else 1.0
            diff = (a.detach().double() - b)[finite].abs().max().item() if finite.any() else 0.0
            err = max(err, diff / max(scale, 1e-300))
    meta = {"case": name, "seed": str(SEED[0]), "torch": torch.__version__,
            "inputs": ",".join(floats), "torch_f32_err": f"{err:.3e}"}
    save_file(tensors, os.path.join(OUT, f"{name}.safetensors"), metadata=meta)


def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=torch.float64) * scale


def positive(*shape):
    return torch.rand(*shape, dtype=torch.float64) * 2 + 0.1


# matmul, every promotion and a broadcast batch
case("matmul_dot", torch.matmul, input=randn(5), other=randn(5))
case("matmul_mv", torch.matmul, input=randn(3, 5), other=randn(5))
case("matmul_vm_batched", torch.matmul, input=randn(4), other=randn(2, 4, 3))
case("matmul_rows", torch.matmul, input=randn(2, 3, 4), other=randn(4, 5))
case("matmul_batched_broadcast", torch.matmul, input=randn(2, 1, 3, 4), other=randn(3, 4, 5))
case("matmul_attention", lambda input, other: torch.matmul(input, other.transpose(-2, -1)),
     input=randn(2, 2, 6, 4), other=randn(2, 2, 6, 4))

# element-wise
case("exp", torch.exp, input=randn(3, 4))
case("log", torch.log, input=positive(3, 4))
case("sqrt", torch.sqrt, input=positive(3, 4))
case("rsqrt", torch.rsqrt, input=positive(3, 4))
case("pow_3", lambda input: torch.pow(input, 3), input=randn(3, 4))
case("pow_half", lambda input: torch.pow(input, 0.5), input=positive(3, 4))
case("pow_neg2", lambda input: torch.pow(input, -2), input=positive(3, 4))
x = randn(3, 4)
x[0, 0] = 0.0
case("abs", torch.abs, input=x)
case("neg", torch.neg, input=randn(3, 4))
x = randn(4, 5)
x[0, :3] = torch.tensor([-0.5, 0.5, 0.0], dtype=torch.float64)
case("clamp", lambda input: torch.clamp(input, -0.5, 0.5), input=x)
case("clamp_min", lambda input: torch.clamp(input, min=0.1), input=randn(4, 5))
case("add_scalar", lambda input: input + 2.5, input=randn(3, 4))
case("mul_scalar", lambda input: input * -1.5, input=randn(3, 4))

# reductions
case("sum_dim1", lambda input: torch.sum(input, 1), input=randn(2, 3, 4))
case("sum_all", lambda input: torch.sum(input), input=randn(2, 3, 4))
case("mean_last_keepdim", lambda input: torch.mean(input, -1, keepdim=True), input=randn(2, 3, 4))
ties = torch.randint(0, 3, (2, 3, 4)).double()
case("amax_ties", lambda input: torch.amax(input, (1, 2)), input=ties)
case("amin_keepdim", lambda input: torch.amin(input, 0, keepdim=True), input=randn(3, 4))
case("logsumexp", lambda input: torch.logsumexp(input, -1), input=randn(3, 5, scale=3))
big = randn(2, 4, scale=3)
big[0] += 1000.0
case("logsumexp_large", lambda input: torch.logsumexp(input, 1), input=big)
case("var_dim0", lambda input: torch.var(input, 0), input=randn(5, 3))
case("var_biased_keepdim", lambda input: torch.var(input, (0, 2), correction=0, keepdim=True), input=randn(3, 2, 4))
case("argmax", lambda input: torch.argmax(input, 1), input=randn(3, 5))
case("argmin_keepdim", lambda input: torch.argmin(input, -1, keepdim=True), input=randn(3, 5))

# slicing and joining
case("narrow", lambda input: torch.narrow(input, -1, 1, 3), input=randn(2, 3, 5))
case("split_cat", lambda input: torch.cat(list(reversed(torch.split(input, 2, 1))), 1), input=randn(2, 5, 3))
case("chunk_cat", lambda input: torch.cat(list(reversed(torch.chunk(input, 3, -1))), -1), input=randn(2, 7))
case("expand", lambda input: input.expand(2, 3, 4), input=randn(3, 1))
case("expand_keep", lambda input: input.expand(4, -1, 5), input=randn(3, 1))
case("unsqueeze_squeeze", lambda input: torch.squeeze(torch.unsqueeze(input, -1) * 2.0, 1), input=randn(2, 1, 3))
case("stack", lambda input, other: torch.stack([input, other, input * other], 1), input=randn(2, 3), other=randn(2, 3))
case("index_select", lambda input, index: torch.index_select(input, 0, index),
     input=randn(4, 3), index=torch.tensor([3, 0, 3, 1], dtype=torch.int64))
case("gather", lambda input, index: torch.gather(input, 1, index),
     input=randn(3, 4), index=torch.tensor([[0, 0, 3], [1, 2, 1], [3, 3, 0]], dtype=torch.int64))
case("embedding", lambda input, weight: F.embedding(input, weight, padding_idx=1),
     input=torch.tensor([[0, 1, 4], [4, 1, 2]], dtype=torch.int64), weight=randn(5, 3))

# masks
case("where_broadcast", lambda input, other: torch.where(input > 0, input, other),
     input=randn(3, 4), other=randn(4))
causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1).to(torch.uint8)
case("masked_fill_causal", lambda input, mask: torch.softmax(input.masked_fill(mask.bool(), float("-inf")), -1),
     input=randn(2, 5, 5), mask=causal)
case("gt_scalar", lambda input: input > 0.2, input=randn(3, 4))
case("le_broadcast", lambda input, other: input <= other, input=randn(3, 4), other=randn(3, 1))
case("detach", lambda input: input * input.detach() * 3.0, input=randn(3, 4))

# log-softmax and losses
case("log_softmax", lambda input: F.log_softmax(input, 1), input=randn(2, 5, 3, scale=2))
case("nll_loss", lambda input, target: F.nll_loss(F.log_softmax(input, 1), target),
     input=randn(4, 5), target=torch.tensor([1, 0, 4, 2], dtype=torch.int64))
case("nll_loss_sum_ignore", lambda input, target: F.nll_loss(input, target, ignore_index=2, reduction="sum"),
     input=randn(3, 4, 2), target=torch.tensor([[1, 2], [2, 3], [0, 1]], dtype=torch.int64))
case("nll_loss_none", lambda input, target: F.nll_loss(input, target, reduction="none"),
     input=randn(3, 4), target=torch.tensor([3, 0, 1], dtype=torch.int64))
case("cross_entropy_pixels", lambda input, target: F.cross_entropy(input, target, label_smoothing=0.1),
     input=randn(2, 4, 3, 2), target=torch.tensor([[[0, 3], [1, -100], [2, 2]], [[3, -100], [0, 1], [1, 1]]], dtype=torch.int64))
case("cross_entropy_smoothing", lambda input, target: F.cross_entropy(input, target, ignore_index=0, label_smoothing=0.2),
     input=randn(5, 6), target=torch.tensor([0, 5, 2, 0, 1], dtype=torch.int64))
case("cross_entropy_1d", lambda input, target: F.cross_entropy(input, target), input=randn(7), target=torch.tensor(3))
case("binary_cross_entropy", F.binary_cross_entropy,
     input=torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05, target=torch.rand(3, 4, dtype=torch.float64))


# one attention block: nn.MultiheadAttention(8, 2, batch_first=True) with a causal mask
def mha(input, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, mask):
    return F.multi_head_attention_forward(
        input.transpose(0, 1), input.transpose(0, 1), input.transpose(0, 1), 8, 2,
        in_proj_weight, in_proj_bias, None, None, False, 0.0, out_proj_weight, out_proj_bias,
        training=False, need_weights=False, attn_mask=mask.bool())[0].transpose(0, 1)


module = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
with torch.no_grad():
    module.in_proj_bias.normal_()
    module.out_proj.bias.normal_()
x = randn(2, 5, 8)
mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
expected = module(x, x, x, attn_mask=mask, need_weights=False)[0]
got = mha(x, module.in_proj_weight, module.in_proj_bias, module.out_proj.weight, module.out_proj.bias, mask.to(torch.uint8))
assert torch.allclose(expected, got), "the functional form is nn.MultiheadAttention"
case("mha_causal", mha, input=x, in_proj_weight=module.in_proj_weight.detach(), in_proj_bias=module.in_proj_bias.detach(),
     out_proj_weight=module.out_proj.weight.detach(), out_proj_bias=module.out_proj.bias.detach(), mask=mask.to(torch.uint8))

# nn.LSTM and nn.GRU (batch_first): every output (output, h_n, c_n) flattened into one
# vector, so one grad_out checks them all, and the gradient of every parameter by name
def recurrent(kind, input_size, hidden, layers, bidirectional, with_state):
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    module = cls(input_size, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional).double()
    names = [n for n, _ in module.named_parameters()]

    def fn(input, **rest):
        params = {n: rest[n] for n in names}
        state = None
        if with_state:
            state = (rest["h0"], rest["c0"]) if kind == "lstm" else rest["h0"]
        out, last = torch.func.functional_call(module, params, (input, state))
        last = last if kind == "lstm" else (last,)
        return torch.cat([out.flatten()] + [s.flatten() for s in last])

    inputs = {"input": randn(2, 5, input_size)}
    inputs.update({n: p.detach().clone() for n, p in module.named_parameters()})
    if with_state:
        inputs["h0"] = randn(layers * (2 if bidirectional else 1), 2, hidden)
        if kind == "lstm":
            inputs["c0"] = randn(layers * (2 if bidirectional else 1), 2, hidden)
    reference = module(inputs["input"], None if not with_state else
                       ((inputs["h0"], inputs["c0"]) if kind == "lstm" else inputs["h0"]))
    assert torch.allclose(torch.cat([reference[0].flatten()] + [s.flatten() for s in
                          (reference[1] if kind == "lstm" else (reference[1],))]), fn(**inputs)), "functional_call is the module"
    return fn, inputs


for kind, layers, bidirectional, with_state in [("lstm", 2, True, True), ("lstm", 1, False, False),
                                                ("gru", 2, True, True), ("gru", 1, False, False)]:
    torch.manual_seed(1000 + layers)
    fn, inputs = recurrent(kind, 3, 4, layers, bidirectional, with_state)
    case(f"{kind}_l{layers}{'_bidirectional' if bidirectional else ''}{'_state' if with_state else ''}", fn, **inputs)

# F.scaled_dot_product_attention: plain with L != S and Ev != E, causal (square, and
# L < S: the mask's top-left corner), a boolean mask shared by every head with one query
# row that sees no key (PyTorch gives it zeros), an additive per-batch mask, a custom scale
torch.manual_seed(2000)
sdpa = F.scaled_dot_product_attention
case("sdpa_plain", lambda query, key, value: sdpa(query, key, value),
     query=randn(2, 2, 5, 4), key=randn(2, 2, 7, 4), value=randn(2, 2, 7, 3))
case("sdpa_causal", lambda query, key, value: sdpa(query, key, value, is_causal=True),
     query=randn(2, 3, 6, 4), key=randn(2, 3, 6, 4), value=randn(2, 3, 6, 4))
case("sdpa_causal_rect", lambda query, key, value: sdpa(query, key, value, is_causal=True, scale=0.3),
     query=randn(1, 2, 4, 3), key=randn(1, 2, 6, 3), value=randn(1, 2, 6, 2))
keep = torch.rand(5, 7) > 0.3
keep[2] = False
case("sdpa_bool_mask", lambda query, key, value, mask: sdpa(query, key, value, attn_mask=mask.bool()),
     query=randn(2, 2, 5, 4), key=randn(2, 2, 7, 4), value=randn(2, 2, 7, 4), mask=keep.to(torch.uint8))
case("sdpa_float_mask", lambda query, key, value, mask: sdpa(query, key, value, attn_mask=mask.detach()),
     query=randn(2, 2, 5, 4), key=randn(2, 2, 7, 4), value=randn(2, 2, 7, 4), mask=randn(2, 1, 5, 7, scale=2.0))
# sin and cos over several periods (sinusoidal and rotary position tables)
case("sin", torch.sin, input=randn(3, 4, scale=4.0))
case("cos", torch.cos, input=randn(3, 4, scale=4.0))
print(f"{SEED[0]} cases in {OUT}")
