#!/usr/bin/env python3
"""Re-creates ../shared/fixtures/resnet18-cifar10/weights.safetensors with PyTorch.

The GPU check cannot carry that 45 MB file (its bundle is limited to 64 MiB), but the file
is a pure function of PyTorch's CPU random stream (see the fixture's README): a torchvision
resnet18(num_classes=10) built after torch.manual_seed(0), then a 3x3 stride-1 conv1 and no
max pool. This script builds it again (with torchvision, or without it by constructing the
same modules in the same order), writes it as safetensors, and checks a digest of every
tensor (name, dtype, shape, bytes) against the one `gpu-check.sh pack` took of the original.

  python3 resnet18_cifar10_weights.py OUT.safetensors [--expect DIGEST] [--no-torchvision]
        [--after-step BATCH.safetensors AFTER.safetensors]
  python3 resnet18_cifar10_weights.py --digest IN.safetensors   # digest of an existing file

--after-step also re-creates weights_after_1_step.safetensors: one SGD step (lr 0.1,
momentum 0.9, weight decay 5e-4) on the fixture batch, on the CPU, 2 threads, deterministic
algorithms, as the fixture's README describes. Float rounding may differ from the original
on another CPU; the test's tolerance (1e-2 of the update) covers that, and the script says
whether the bytes came out identical.

Exit status 0 when the digest matches (or none was expected), 1 when it does not.
"""
import argparse
import hashlib
import json
import struct
import sys

DTYPES = {"float32": "F32", "int64": "I64"}


def digest(tensors):
    """sha256 over (name, dtype, shape, raw bytes) of every tensor, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        h.update(f"{name}|{dtype}|{list(shape)}|".encode())
        h.update(data)
    return h.hexdigest()


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], body[b:e])
    return out


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(tensors):
            f.write(tensors[name][2])
    import os
    os.replace(tmp, path)


def resnet18_without_torchvision(nn, num_classes):
    """torchvision's ResNet-18, module for module in torchvision's construction order."""

    class BasicBlock(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make_layer(64, 1)
            self.layer2 = self._make_layer(128, 2)
            self.layer3 = self._make_layer(256, 2)
            self.layer4 = self._make_layer(512, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, planes, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            layers.append(BasicBlock(planes, planes, 1, None))
            return nn.Sequential(*layers)

    return ResNet()


def build_model(use_torchvision):
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = None
    if use_torchvision:
        try:
            import torchvision

            model = torchvision.models.resnet18(num_classes=10)
        except ImportError:
            print("torchvision not installed: building the same modules without it", file=sys.stderr)
    if model is None:
        model = resnet18_without_torchvision(nn, 10)
    model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    return model


def state_tensors(model):
    tensors = {}
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        tensors[name] = (DTYPES[str(t.dtype).removeprefix("torch.")], tuple(t.shape), t.numpy().tobytes())
    return tensors


def one_sgd_step(model, batch_path):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    batch = read_safetensors(batch_path)
    _, shape, data = batch["images"]
    images = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
    _, shape, data = batch["labels"]
    labels = torch.frombuffer(bytearray(data), dtype=torch.int64).reshape(shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    model.train()
    loss = F.cross_entropy(model(images), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path")
    p.add_argument("--expect", help="digest the rebuilt tensors must have")
    p.add_argument("--digest", action="store_true", help="print the digest of PATH and exit")
    p.add_argument("--no-torchvision", action="store_true", help="build without torchvision")
    p.add_argument("--after-step", nargs=2, metavar=("BATCH", "AFTER"))
    p.add_argument("--expect-after", help="digest of the original after-step file (informational)")
    a = p.parse_args()
    if a.digest:
        print(digest(read_safetensors(a.path)))
        return 0
    model = build_model(not a.no_torchvision)
    tensors = state_tensors(model)
    d = digest(tensors)
    if a.expect and d != a.expect:
        print(f"rebuilt weights differ from the fixture: digest {d}, expected {a.expect}", file=sys.stderr)
        return 1
    write_safetensors(a.path, tensors)
    print(f"wrote {a.path} ({len(tensors)} tensors, digest {d}{', matches the fixture' if a.expect else ''})")
    if a.after_step:
        batch, after = a.after_step
        loss = one_sgd_step(model, batch)
        tensors = state_tensors(model)
        d = digest(tensors)
        same = "" if not a.expect_after else (
            ", bit-identical to the original" if d == a.expect_after else
            ", differs from the original in float rounding (the test's tolerance applies)")
        write_safetensors(after, tensors)
        print(f"wrote {after} after one SGD step (loss {loss:.6f}, digest {d}{same})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
