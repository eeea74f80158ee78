"""PyTorch's ResNet-50 training step on CUDA at SINGA's documented setting (batch 32,
224x224, SGD lr 0.1, momentum 0.9, weight decay 1e-5), timed with CUDA events after
warm-up: the side-by-side figure for scripts/gpu-check.sh. TF32 convolutions and matrix
products, as PyTorch's defaults for cuDNN (and as wick's cuDNN path runs them).

    python3 scripts/torch_gpu_step.py [--reps 20]
"""
import argparse
import statistics

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    model = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5)
    x = torch.randn(args.batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for i in range(args.warmup + args.reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        if i >= args.warmup:
            times.append(start.elapsed_time(end) / 1e3)
    med = statistics.median(times)
    print(f"PyTorch {torch.__version__} ResNet-50 train step, batch {args.batch}, 224x224, "
          f"{torch.cuda.get_device_name()}: median {med * 1e3:.2f} ms over {args.reps} "
          f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}); {args.batch / med:.0f} images/s")


if __name__ == "__main__":
    main()
