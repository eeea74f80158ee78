#!/usr/bin/env python3
"""Records a PyTorch profiler trace of torchvision training steps that `wick-prof
import-torch` reads, so a PyTorch run and a wick run of the same model can be diffed
per op type and per layer.

    python3 scripts/torch_trace.py --model resnet18 --stem cifar --num-classes 10 \
        --batch-size 8 --image-size 32 --iterations 4 --skip 2 --out torch-trace.json
    wick-prof import-torch torch-trace.json --out torch.json
    wick-prof diff torch.json wick.json --allow-different-graphs

The step is the one wick's examples time: forward, cross-entropy, backward, then SGD
with momentum 0.9 (torch's default multi-tensor implementation). Each module's forward
runs inside a `record_function` scope named by its state-dict prefix (`layer1.0.conv1`);
the phases inside `wick.phase.forward`, `wick.phase.backward` and
`wick.phase.optimizer` scopes; each step is the profiler's `ProfilerStep#N`. Backward
ops name no module: the importer finds it through their forward op's sequence number.

`--tiny` swaps the model for a four-layer CNN (conv, batch norm, ReLU, pooling, linear):
the fixture of wick-profiler's importer tests.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function, schedule

SCOPE = "wick.module."


def build(args):
    if args.tiny:
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, args.num_classes),
        )
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=args.num_classes)
    if args.stem == "cifar":
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model


def scope_modules(model):
    """Opens a record_function scope around every module's forward, named by its path;
    returns the hooks' handles."""
    open_scopes = []

    def enter(name):
        def hook(_module, _inputs):
            scope = record_function(SCOPE + name)
            scope.__enter__()
            open_scopes.append(scope)

        return hook

    def leave(_module, _inputs, _output):
        open_scopes.pop().__exit__(None, None, None)

    handles = []
    for name, module in model.named_modules():
        if name and not isinstance(module, nn.Identity):
            handles.append(module.register_forward_pre_hook(enter(name)))
            handles.append(module.register_forward_hook(leave))
    return handles


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--stem", choices=["imagenet", "cifar"], default="imagenet")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--iterations", type=int, default=4, help="timed steps")
    p.add_argument("--skip", type=int, default=2, help="untimed warm-up steps")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-shapes", action="store_true",
                   help="record no input shapes: less profiler overhead, but convolutions "
                   "lose their kind (depthwise, 1x1) and the importer sees them as dense")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = build(args).train()
    hooks = scope_modules(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, args.num_classes, (args.batch_size,))

    plan = schedule(wait=0, warmup=args.skip, active=args.iterations, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=plan, record_shapes=not args.no_shapes) as prof:
        for _ in range(args.skip + args.iterations):
            opt.zero_grad(set_to_none=True)
            with record_function("wick.phase.forward"):
                loss = F.cross_entropy(model(x), y)
            with record_function("wick.phase.backward"):
                loss.backward()
            with record_function("wick.phase.optimizer"):
                opt.step()
            prof.step()
    prof.export_chrome_trace(args.out)
    # The same steps without the profiler or the module scopes: its overhead.
    for handle in hooks:
        handle.remove()
    unprofiled = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        unprofiled.append((time.perf_counter() - start) * 1e3)
    # The run, beside the events, for the profile's run information.
    with open(args.out) as f:
        trace = json.load(f)
    trace["wick_run"] = {
        "model": "tiny" if args.tiny else args.model,
        "batch": args.batch_size,
        "image_size": f"{args.image_size}x{args.image_size}",
        "threads": args.threads,
        "torch_version": torch.__version__,
        "cpu_model": cpu_model(),
    }
    with open(args.out, "w") as f:
        json.dump(trace, f)
    steps = sorted(e["dur"] / 1e3 for e in trace["traceEvents"]
                   if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))
    print(f"PyTorch step, median: {statistics.median(steps):.2f} ms profiled, "
          f"{statistics.median(unprofiled):.2f} ms unprofiled")
    print(f"wrote {args.out}: {args.iterations} steps of {args.model if not args.tiny else 'tiny'}")


if __name__ == "__main__":
    main()
