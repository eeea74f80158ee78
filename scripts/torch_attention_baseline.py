"""PyTorch's side of the attention comparison: F.scaled_dot_product_attention forward +
backward on q, k, v of [batch, heads, T, dim] float32 (the kernel PyTorch picks on the CPU:
its flash-attention kernel for these inputs), the median of --reps timed steps after
warm-up, as one JSON line. Peak memory is the process's (GNU time, in the caller).

  python3 scripts/torch_attention_baseline.py --t 1024 [--causal] [--threads 2]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--t", type=int, default=1024)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--dim", type=int, default=64)
p.add_argument("--causal", action="store_true")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=10)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
shape = (args.batch, args.heads, args.t, args.dim)
q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
g = torch.randn(shape)


def step():
    y = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    return torch.autograd.grad(y, (q, k, v), g)


for _ in range(2):
    step()
times = []
for _ in range(args.reps):
    t0 = time.perf_counter()
    step()
    times.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"case": f"attention_t{args.t}", "causal": args.causal, "shape": list(shape),
                  "median_ms": round(statistics.median(times), 3), "torch": torch.__version__}))
