#!/usr/bin/env python3
"""Hugging Face's GPT2LMHeadModel on random weights: fixtures/gpt2/tiny.safetensors and
tiny.config.json (the model's config.json, the format wick reads).

A 2-layer, 32-wide, 4-head GPT-2 over a 50-token vocabulary, no dropout, initialised by
transformers (seed 0) and run in float64: the tokens [2, 9], the weights under their
Hugging Face names (`weights.<name>`; `lm_head.weight` is the tied `transformer.wte`
weight, left out as in Hugging Face's safetensors files), the logits of tokens[:, :-1],
the loss against tokens[:, 1:] (transformers' `labels` loss, computed in the model's dtype
where transformers casts to float32), and every parameter after
one torch.optim.AdamW step (lr 1e-2, weight decay 0.01) on that loss (`after.<name>`), and
transformers' greedy generation of 8 tokens after tokens[0, :3] (`generated`).
Metadata: versions, and PyTorch float32's error against float64 on the logits and on the
updates (the scale wick's float32 is judged by).

Usage: python3 scripts/make_gpt2_fixture.py [OUT_DIR]  (needs torch, transformers,
safetensors; default OUT_DIR fixtures/gpt2)
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = sys.argv[1] if len(sys.argv) > 1 else "fixtures/gpt2"
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
config = GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                    embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                    attn_implementation="eager")
base = GPT2LMHeadModel(config).eval()
tokens = torch.randint(0, 50, (2, 9))


def run(dtype):
    m = GPT2LMHeadModel(config).eval()
    m.load_state_dict(base.state_dict())
    m = m.to(dtype)
    out = m(input_ids=tokens[:, :-1])
    # transformers' own `labels` loss casts the logits to float32; the same shifted
    # cross-entropy in the model's dtype, checked against it.
    full = m(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(full[:, :-1].reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1))
    hf = m(input_ids=tokens, labels=tokens).loss
    assert abs(hf.item() - loss.item()) < 1e-5 * abs(loss.item()), (hf.item(), loss.item())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
    loss.backward()
    opt.step()
    after = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return out.logits.detach(), loss.detach(), after


names = [k for k in base.state_dict() if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))]
logits, loss, after = run(torch.float64)
logits32, loss32, after32 = run(torch.float32)
rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
update_err = max(rel(after32[k] - base.state_dict()[k], after[k] - base.state_dict()[k].double()) for k in names)
# Greedy generation (transformers' generate, its key/value cache) of 8 tokens after the
# first sequence's first 3, in float64.
with torch.no_grad():
    generated = base.double().generate(tokens[:1, :3], max_new_tokens=8, do_sample=False,
                                       pad_token_id=0)[0]
tensors = {"tokens": tokens.contiguous(), "logits": logits.contiguous(), "loss": loss.reshape(1),
           "generated": generated.contiguous()}
for k in names:
    tensors[f"weights.{k}"] = base.state_dict()[k].double().contiguous()
    tensors[f"after.{k}"] = after[k].contiguous()
meta = {"torch": torch.__version__, "transformers": transformers.__version__,
        "torch_f32_logits_err": f"{rel(logits32, logits):.3e}", "torch_f32_update_err": f"{update_err:.3e}",
        "torch_f32_loss_err": f"{abs(loss32.double() - loss).item() / loss.item():.3e}"}
save_file(tensors, os.path.join(OUT, "tiny.safetensors"), metadata=meta)
with open(os.path.join(OUT, "tiny.config.json"), "w") as f:
    f.write(config.to_json_string())
print(f"{len(names)} parameters, loss {loss.item():.6f}, {meta}")
