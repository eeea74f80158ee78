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
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from transformers_fixture import adamw_step, copy_as, save, start  # same folder

OUT = start("fixtures/gpt2")
config = GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                    embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                    attn_implementation="eager")
base = GPT2LMHeadModel(config).eval()
tokens = torch.randint(0, 50, (2, 9))


def run(dtype):
    return adamw_step(copy_as(base, dtype), tokens, config.vocab_size)


names = [k for k in base.state_dict() if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))]
f64 = run(torch.float64)
f32 = run(torch.float32)
# Greedy generation (transformers' generate, its key/value cache) of 8 tokens after the
# first sequence's first 3, in float64.
with torch.no_grad():
    generated = copy_as(base, torch.float64).generate(tokens[:1, :3], max_new_tokens=8,
                                                  do_sample=False, pad_token_id=0)[0]
save(OUT, config, base, names, tokens, generated, f64, f32)
