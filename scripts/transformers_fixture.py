"""What scripts/make_gpt2_fixture.py and make_llama_fixture.py share: one AdamW step of a
transformers causal language model on a batch, and the fixture file they write."""
import os
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file


def start(default_out):
    """The output folder (the first argument, else `default_out`), created; torch seeded
    (0), deterministic and on one thread."""
    out = sys.argv[1] if len(sys.argv) > 1 else default_out
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    return out


def copy_as(base, dtype):
    """A fresh model of `base`'s class and config holding its weights, in `dtype`."""
    m = type(base)(base.config).eval()
    m.load_state_dict(base.state_dict())
    return m.to(dtype)


def adamw_step(m, tokens, vocab_size):
    """The logits of tokens[:, :-1], the next-token loss against tokens[:, 1:] (checked
    against transformers' own `labels` loss, which it computes in float32), and every
    parameter after one torch.optim.AdamW step (lr 1e-2, weight decay 0.01) on it."""
    out = m(input_ids=tokens[:, :-1])
    full = m(input_ids=tokens).logits
    loss = F.cross_entropy(full[:, :-1].reshape(-1, vocab_size), tokens[:, 1:].reshape(-1))
    hf = m(input_ids=tokens, labels=tokens).loss
    assert abs(hf.item() - loss.item()) < 1e-5 * abs(loss.item()), (hf.item(), loss.item())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
    loss.backward()
    opt.step()
    after = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return out.logits.detach(), loss.detach(), after


def save(out_dir, config, base, names, tokens, generated, f64, f32, meta=None, stem="tiny", extra=None):
    """<stem>.safetensors and <stem>.config.json in `out_dir`, with the `extra` tensors: the tokens, the float64 step's
    logits, loss and parameters after it (`after.<name>`), the weights before it
    (`weights.<name>`), the generated tokens, and PyTorch float32's errors against float64
    on the logits, the loss and the updates (`f64`, `f32`: adamw_step's results)."""
    (logits, loss, after), (logits32, loss32, after32) = f64, f32
    rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
    state = base.state_dict()
    update_err = max(rel(after32[k] - state[k], after[k] - state[k].double()) for k in names)
    tensors = {"tokens": tokens.contiguous(), "logits": logits.contiguous(), "loss": loss.reshape(1),
               "generated": generated.contiguous(), **(extra or {})}
    for k in names:
        tensors[f"weights.{k}"] = state[k].double().contiguous()
        tensors[f"after.{k}"] = after[k].contiguous()
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, **(meta or {}),
            "torch_f32_logits_err": f"{rel(logits32, logits):.3e}", "torch_f32_update_err": f"{update_err:.3e}",
            "torch_f32_loss_err": f"{abs(loss32.double() - loss).item() / loss.item():.3e}"}
    save_file(tensors, os.path.join(out_dir, f"{stem}.safetensors"), metadata=meta)
    with open(os.path.join(out_dir, f"{stem}.config.json"), "w") as f:
        f.write(config.to_json_string())
    print(f"{len(names)} parameters, loss {loss.item():.6f}, generated {generated.tolist()}, {meta}")
