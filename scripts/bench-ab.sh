#!/bin/bash
# Side-by-side `cargo bench --bench train_step` of two commits: builds each in its own
# worktree under /tmp/bench-ab (release, sharing no target folder with the checkout), then
# runs the ResNet-18 CIFAR b8 group of each in turn, ROUNDS times (alternating), and prints
# every median and their ratio (after / before) per benchmark.
#
# Usage: scripts/bench-ab.sh BEFORE AFTER [ROUNDS]   e.g. scripts/bench-ab.sh c5a69d9 HEAD 4
set -euo pipefail
before=$1 after=$2 rounds=${3:-4}
root=/tmp/bench-ab
filter='resnet18 cifar b8 32x32/wick'
mkdir -p "$root"
for side in before after; do
  rev=${!side}
  dir=$root/$side
  if [ ! -d "$dir" ]; then git worktree add -f "$dir" "$rev" >/dev/null; fi
  git -C "$dir" checkout -q --detach "$rev"
  (cd "$dir" && cargo bench --bench train_step --no-run 2>&1 | tail -1)
done
bin() { ls "$root/$1"/target/release/deps/train_step-* | grep -v '\.d$' | head -1; }
log=$root/runs.log
: > "$log"
for round in $(seq "$rounds"); do
  for side in before after; do
    (cd "$root/$side" && "$(bin "$side")" --bench "$filter" --warm-up-time 3 --measurement-time 15 --noplot) 2>&1 |
      grep -E '^train_step|time:' | sed "s/^/$side /" >> "$log"
  done
done
python3 - "$log" <<'PY'
import re, statistics, sys
runs = {}
name = None
for line in open(sys.argv[1]):
    side, rest = line.split(' ', 1)
    if rest.startswith('train_step'):
        name = rest.strip()
    m = re.search(r'time:\s+\[\S+ \S+ (\S+) ms', rest)
    if m:
        runs.setdefault(name, {}).setdefault(side, []).append(float(m.group(1)))
for name, sides in runs.items():
    b, a = statistics.median(sides['before']), statistics.median(sides['after'])
    print(f"{name}: before {sides['before']} median {b:.1f} ms; after {sides['after']} median {a:.1f} ms; ratio {a / b:.3f}")
PY
