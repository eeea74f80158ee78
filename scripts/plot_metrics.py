#!/usr/bin/env python3
"""Plots train_resnet's --log (JSON lines, one per epoch) as an SVG learning curve:
accuracy (train and test) and loss (train and test) per epoch. No dependencies.

    python3 scripts/plot_metrics.py metrics.jsonl learning-curve.svg
"""
import json
import sys


def polyline(points, color, dash=""):
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline fill="none" stroke="{color}" stroke-width="2"{extra} points="{pts}"/>'


def panel(x0, title, series, ymax, epochs, fmt):
    w, h, left, top = 360, 220, 45, 30
    out = [f'<text x="{x0 + left}" y="18" font-size="13" font-weight="bold">{title}</text>']
    out.append(f'<rect x="{x0 + left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for k in range(5):
        v = ymax * k / 4
        y = top + h - h * k / 4
        out.append(f'<text x="{x0 + left - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{fmt(v)}</text>')
        out.append(f'<line x1="{x0 + left}" x2="{x0 + left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
    for e in range(1, epochs + 1):
        x = x0 + left + w * (e - 1) / max(epochs - 1, 1)
        out.append(f'<text x="{x:.1f}" y="{top + h + 14}" font-size="10" text-anchor="middle">{e}</text>')
    for i, (name, values, color, dash) in enumerate(series):
        pts = [(x0 + left + w * (e - 1) / max(epochs - 1, 1), top + h - h * min(v, ymax) / ymax) for e, v in enumerate(values, 1)]
        out.append(polyline(pts, color, dash))
        out.append(f'<text x="{x0 + left + w - 110}" y="{top + h / 2 + 14 * i:.0f}" font-size="11" fill="{color}">{name}</text>')
    out.append(f'<text x="{x0 + left + w / 2}" y="{top + h + 28}" font-size="11" text-anchor="middle">epoch</text>')
    return out


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    epochs = len(rows)
    acc = [("train accuracy", [r["train_accuracy"] * 100 for r in rows], "#4e79a7", "6,3"),
           ("test accuracy", [r["test_accuracy"] * 100 for r in rows], "#e15759", "")]
    loss = [("train loss", [r["train_loss"] for r in rows], "#4e79a7", "6,3"),
            ("test loss", [r["test_loss"] for r in rows], "#e15759", "")]
    lmax = max(max(v for _, s, _, _ in loss for v in s), 0.1)
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="840" height="290" font-family="sans-serif">',
             '<rect width="840" height="290" fill="white"/>']
    parts += panel(0, "accuracy (%)", acc, 100.0, epochs, lambda v: f"{v:.0f}")
    parts += panel(420, "cross-entropy loss", loss, lmax * 1.1, epochs, lambda v: f"{v:.2f}")
    parts.append("</svg>")
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write("\n".join(parts) + "\n")
    import os
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])


if __name__ == "__main__":
    main()
