#!/usr/bin/env python3
"""Hugging Face's LlamaForCausalLM on random weights: fixtures/llama/tiny.safetensors and
tiny.config.json (the model's config.json, the format wick reads), and llama3.* (below).

A 2-layer, 32-wide LLaMA with 4 query heads sharing 2 key/value heads (grouped-query
attention), an MLP 48 wide, rope_theta 1000 and an untied head, over a 64-token vocabulary,
initialised by transformers (seed 0): the tokens [2, 9], the weights under their Hugging
Face names (`weights.<name>`), the logits of tokens[:, :-1], the loss against tokens[:, 1:],
every parameter after one torch.optim.AdamW step (lr 1e-2, weight decay 0.01) on that loss
(`after.<name>`), and transformers' greedy generation of 8 tokens after tokens[0, :3]
(`generated`). llama3.* is the same model with Llama 3.2's rotary scaling
(`rope_type: "llama3"`, scaled down: rope_theta 100, factor 4, pretraining context 32) and
a head tied to the embedding, and holds transformers' float32 inverse frequencies too
(`rope_inv_freq`).

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
import math

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

from transformers_fixture import adamw_step, copy_as, save, start  # same folder

OUT = start("fixtures/llama")


def rms_norm_native(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def inverse_frequencies(config, dtype):
    """transformers' default or llama3 inverse frequencies, computed in `dtype`."""
    rope = config.rope_parameters
    dim = config.head_dim
    inv = 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=dtype) / dim))
    if rope.get("rope_type") == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        context = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > context / low, inv / factor, inv)
        smooth = (context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < context / high) * ~(wavelen > context / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rotary_native(self, x, position_ids):
    freqs = position_ids[..., None].to(x.dtype) * inverse_frequencies(self.config, x.dtype)
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


def make(stem, config):
    base = LlamaForCausalLM(config).eval()
    tokens = torch.randint(0, config.vocab_size, (2, 9))

    def run(dtype):
        return adamw_step(copy_as(base, dtype), tokens, config.vocab_size)

    names = [k for k in base.state_dict() if not (config.tie_word_embeddings and k == "lm_head.weight")]
    with torch.no_grad():
        upcast_logits = copy_as(base, torch.float64)(input_ids=tokens[:, :-1]).logits
    with native_precision():
        f64 = run(torch.float64)
        with torch.no_grad():
            generated = copy_as(base, torch.float64).generate(tokens[:1, :3], max_new_tokens=8, do_sample=False)[0]
    f32 = run(torch.float32)
    effect = ((upcast_logits - f64[0]).abs().max() / f64[0].abs().max()).item()
    extra = {}
    if stem != "tiny":
        extra["rope_inv_freq"] = base.model.rotary_emb.inv_freq.clone()
    save(OUT, config, base, names, tokens, generated, f64, f32, {"f64_upcast_effect": f"{effect:.3e}"},
         stem=stem, extra=extra)


common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, bos_token_id=0,
              eos_token_id=0, pad_token_id=0, attn_implementation="sdpa")
make("tiny", LlamaConfig(**common, max_position_embeddings=16, rope_theta=1000.0,
                         tie_word_embeddings=False))
# Llama 3.2's rotary scaling and tied head, scaled down: with head_dim 8, rope_theta 100
# and a pretraining context of 32, the 4 frequencies' wavelengths (6.3, 19.9, 62.8 and 199
# positions) fall in each of llama3's three bands (kept below 8, interpolated, divided by
# the factor above 32).
make("llama3", LlamaConfig(**common, max_position_embeddings=64, tie_word_embeddings=True,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 100.0, "factor": 4.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 32}))
