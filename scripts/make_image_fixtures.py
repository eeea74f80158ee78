#!/usr/bin/env python3
"""References for wick's image decoding and transforms: fixtures/images.

Writes small images in the modes datasets hold (JPEG: RGB, grey, CMYK; PNG: RGB, RGBA,
palette, grey, 16-bit grey and RGB), then `reference.safetensors` with what PIL and
torchvision make of them:
- `<name>.rgb`: `Image.open(f).convert("RGB")` as uint8 [H, W, 3] (torchvision's
  ImageFolder loader), and `<name>.raw` int32 [H, W] for the 16-bit grey image;
- for three of the images (`rgb_jpg`, `grey_png`, `palette_png`):
- `resize.<name>.<h>x<w>`: `F.resize(t, [h, w], antialias=True)` of that image as a float
  tensor in [0, 1] (torchvision's tensor path), float32 [3, h, w];
- `resize_short.<name>`: `F.resize(t, 20, antialias=True)` (the shorter side to 20);
- `center_crop.<name>`: `F.center_crop(t, [13, 16])`, including a crop larger than the image;
- `resized_crop.<name>.<k>`: `F.resized_crop(t, top, left, h, w, [12, 14], antialias=True)`
  for the boxes in the metadata;
- `normalize.<name>`: `F.normalize(t, ImageNet mean, std)`.

Usage: python3 scripts/make_image_fixtures.py [OUT_DIR]  (needs torch, torchvision, pillow,
safetensors; default OUT_DIR fixtures/images). The images are generated, never downloaded.
"""
import json
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else "fixtures/images"
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)


def scene(h, w):
    """A smooth colour scene with edges and some noise: JPEG-like content."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0)
    g = 255 * x / max(w - 1, 1)
    b = np.where((x - w / 2) ** 2 + (y - h / 2) ** 2 < (min(h, w) / 3) ** 2, 220.0, 40.0)
    img = np.stack([r, g, b], -1) + rng.normal(0, 8, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


H, W = 30, 41
rgb = scene(H, W)
grey = (rgb.astype(np.float64) @ [0.299, 0.587, 0.114]).astype(np.uint8)
files = {}


def write_png16(path, img):
    """A 16-bit RGB PNG, which PIL cannot write (filter 0 on every row)."""
    h, w, _ = img.shape
    raw = b"".join(b"\0" + img[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def save(name, img, **kw):
    path = os.path.join(OUT, name)
    img.save(path, **kw)
    files[name.replace(".", "_")] = name


save("rgb.jpg", Image.fromarray(rgb), quality=90)
save("rgb444.jpg", Image.fromarray(rgb), quality=95, subsampling=0)
save("grey.jpg", Image.fromarray(grey, "L"), quality=90)
save("cmyk.jpg", Image.fromarray(rgb).convert("CMYK"), quality=95)
save("progressive.jpg", Image.fromarray(rgb), quality=85, progressive=True)
save("rgb.png", Image.fromarray(rgb))
rgba = np.concatenate([rgb, rng.integers(0, 256, (H, W, 1), dtype=np.uint8)], -1)
save("rgba.png", Image.fromarray(rgba, "RGBA"))
save("palette.png", Image.fromarray(rgb).quantize(16))
save("grey.png", Image.fromarray(grey, "L"))
save("grey_alpha.png", Image.fromarray(np.stack([grey, grey // 2], -1), "LA"))
# 16-bit images: PIL reads 16-bit RGB as 8-bit (the high byte); its 16-bit grey mode
# ("I;16") clips to 255 on the way to RGB, which wick does not copy (see the README).
grey16 = (grey.astype(np.uint16) * 257 + rng.integers(0, 200, (H, W))).astype(np.uint16)
save("grey16.png", Image.fromarray(grey16))
rgb16 = (rgb.astype(np.uint16) * 257 + rng.integers(0, 200, (H, W, 3))).astype(np.uint16)
write_png16(os.path.join(OUT, "rgb16.png"), rgb16)
files["rgb16_png"] = "rgb16.png"

tensors = {}
meta = {}
# The transforms do not depend on how an image was stored: three images are enough.
TRANSFORMED = {"rgb_jpg", "grey_png", "palette_png"}
boxes = [(0, 0, H, W), (3, 5, 20, 17), (10, 2, 7, 30), (0, 20, 30, 21)]
for key, name in sorted(files.items()):
    with Image.open(os.path.join(OUT, name)) as im:
        meta[f"{key}.mode"] = im.mode
        pil_rgb = np.asarray(im.convert("RGB")).copy()
        if im.mode == "I;16":
            tensors[f"{key}.raw"] = torch.from_numpy(np.asarray(im).astype(np.int32))
    tensors[f"{key}.rgb"] = torch.from_numpy(pil_rgb)
    if key not in TRANSFORMED:
        continue
    t = torch.from_numpy(pil_rgb).permute(2, 0, 1).float() / 255.0
    for h, w in [(12, 16), (7, 9), (45, 60), (30, 20)]:
        tensors[f"resize.{key}.{h}x{w}"] = F.resize(t, [h, w], antialias=True).contiguous()
    tensors[f"resize_short.{key}"] = F.resize(t, 20, antialias=True).contiguous()
    tensors[f"center_crop.{key}"] = F.center_crop(t, [13, 16]).contiguous()
    tensors[f"center_crop_big.{key}"] = F.center_crop(t, [34, 44]).contiguous()
    for k, (top, left, h, w) in enumerate(boxes):
        tensors[f"resized_crop.{key}.{k}"] = F.resized_crop(
            t, top, left, h, w, [12, 14], antialias=True
        ).contiguous()
    tensors[f"normalize.{key}"] = F.normalize(
        t, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    ).contiguous()
meta["boxes"] = json.dumps(boxes)
meta["files"] = json.dumps(files)
save_file(tensors, os.path.join(OUT, "reference.safetensors"), metadata=meta)
print(f"{len(files)} images and {len(tensors)} references in {OUT}")
