#!/usr/bin/env python3
"""Hugging Face's LlamaForCausalLM on random weights: fixtures/llama/tiny.safetensors and
tiny.config.json (the model's config.json, the format wick reads).

A 2-layer, 32-wide LLaMA with 4 query heads sharing 2 key/value heads (grouped-query
attention), an MLP 48 wide, rope_theta 1000 and an untied head, over a 64-token vocabulary,
initialised by transformers (seed 0): the tokens [2, 9], the weights under their Hugging
Face names (`weights.<name>`), the logits of tokens[:, :-1], the loss against tokens[:, 1:],
every parameter after one torch.optim.AdamW step (lr 1e-2, weight decay 0.01) on that loss
(`after.<name>`), and transformers' greedy generation of 8 tokens after tokens[0, :3]
(`generated`).

The reference runs in float64. transformers computes two things in float32 whatever the
model's dtype, an upcast meant for 16-bit models: LlamaRMSNorm's statistics and the rotary
cos/sin tables. In the float64 run both are computed in float64 instead (the same formulas;
for float32 they are the same computation), so that the reference is float64 throughout;
`f64_upcast_effect` records how far that moves the logits from transformers' own float64
run. The float32 run is transformers' code as it is. Metadata: versions, and PyTorch
float32's error against float64 on the logits, the loss and the updates (the scale wick's
float32 is judged by).

Usage: python3 scripts/make_llama_fixture.py [OUT_DIR]  (needs torch, transformers,
safetensors; default OUT_DIR fixtures/llama)
"""
import contextlib

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

from transformers_fixture import adamw_step, save, start  # same folder

OUT = start("fixtures/llama")
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                     rms_norm_eps=1e-6, rope_theta=1000.0, tie_word_embeddings=False,
                     bos_token_id=0, eos_token_id=0, pad_token_id=0, attn_implementation="sdpa")
base = LlamaForCausalLM(config).eval()
tokens = torch.randint(0, 64, (2, 9))


def rms_norm_native(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def rotary_native(self, x, position_ids):
    dim = 2 * self.inv_freq.shape[0]
    theta = self.config.rope_parameters["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=x.dtype) / dim))
    freqs = position_ids[..., None].to(x.dtype) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@contextlib.contextmanager
def native_precision():
    """LlamaRMSNorm and the rotary tables in the model's dtype, not float32."""
    saved = (modeling_llama.LlamaRMSNorm.forward, modeling_llama.LlamaRotaryEmbedding.forward)
    modeling_llama.LlamaRMSNorm.forward = rms_norm_native
    modeling_llama.LlamaRotaryEmbedding.forward = rotary_native
    try:
        yield
    finally:
        modeling_llama.LlamaRMSNorm.forward, modeling_llama.LlamaRotaryEmbedding.forward = saved


def model(dtype):
    m = LlamaForCausalLM(config).eval()
    m.load_state_dict(base.state_dict())
    return m.to(dtype)


def run(dtype):
    return adamw_step(model(dtype), tokens, config.vocab_size)


names = list(base.state_dict())
with torch.no_grad():
    upcast_logits = model(torch.float64)(input_ids=tokens[:, :-1]).logits
with native_precision():
    f64 = run(torch.float64)
    with torch.no_grad():
        generated = model(torch.float64).generate(tokens[:1, :3], max_new_tokens=8, do_sample=False)[0]
f32 = run(torch.float32)
effect = ((upcast_logits - f64[0]).abs().max() / f64[0].abs().max()).item()
save(OUT, config, base, names, tokens, generated, f64, f32, {"f64_upcast_effect": f"{effect:.3e}"})
