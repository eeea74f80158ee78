#!/usr/bin/env python3
"""PyTorch's GPT-2 or LLaMA training step, timed as scripts/compare_pytorch.sh compares it
with `train_gpt`: Hugging Face's GPT2LMHeadModel or LlamaForCausalLM (by the config's
`model_type`; eager, its default SDPA attention) built from the same config.json, AdamW (lr 3e-3, weight decay 0.01, as train_gpt's defaults), the
next-token cross-entropy over a batch of random byte tokens; the median of `--reps` steps
after `--warmup`. Prints one JSON line with "median_ms".

Usage: python3 scripts/torch_gpt_baseline.py --config gpt.json [--batch 4] [--context 256]
       [--threads 2] [--warmup 3] [--reps 7]
"""
import argparse
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from baseline_timing import median_ms  # same folder


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        fields = json.load(f)
    llama = fields.pop("model_type", "gpt2") == "llama"
    # Generation's token ids are unused; the bytes' range holds them.
    cfg = (LlamaConfig if llama else GPT2Config)(**fields, bos_token_id=0, eos_token_id=0)
    model = (LlamaForCausalLM if llama else GPT2LMHeadModel)(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    # train_gpt predicts `context` tokens from `context + 1`: the same here.
    tokens = torch.randint(0, cfg.vocab_size, (a.batch, a.context + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
        loss.backward()
        opt.step()

    median = median_ms(step, a.warmup, a.reps)
    print(json.dumps({"case": "llama" if llama else "gpt2", "config": a.config, "batch": a.batch, "context": a.context,
                      "threads": a.threads, "median_ms": median,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
