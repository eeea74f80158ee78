# Re-runs the audit of issue #29 on a profile written with --json: per-op sums against
# the phases and the iteration, stage/block/layer rows against the ops, and the whole
# step against its parts.  python3 scripts/profile_sums.py PROFILE.json
import json, sys
d = json.load(open(sys.argv[1]))
ops = sum(o['mean_sec'] for o in d['ops'])
by_phase = {}
for o in d['ops']:
    by_phase[o['phase']] = by_phase.get(o['phase'], 0) + o['mean_sec']
print(f"sum of per-op means {ops*1e3:.4f} ms")
for p in d['phases']:
    print(f"  {p['phase']:10s} phase {p['sec']*1e3:.4f} ms, its ops {p['ops_sec']*1e3:.4f}, per-op sum {by_phase.get(p['phase'],0)*1e3:.4f}")
ph = sum(p['sec'] for p in d['phases'])
print(f"sum of phases {ph*1e3:.4f} ms; iteration {d['iteration_sec']*1e3:.4f} ms; diff {(d['iteration_sec']-ph)*1e3:+.4f}")
for k in ('stages', 'blocks', 'layers'):
    t = sum(r['total_sec'] for r in d[k])
    f = sum(r['forward_sec'] for r in d[k]); b = sum(r['backward_sec'] for r in d[k]); o = sum(r['optimizer_sec'] for r in d[k])
    print(f"{k:7s} rows: total {t*1e3:.4f} ms (fwd {f*1e3:.4f} bwd {b*1e3:.4f} opt {o*1e3:.4f}) vs per-op sum {ops*1e3:.4f}")
s = d['step']
parts = ['input_wait_sec','host_to_device_sec','run_sec','loss_read_back_sec','non_finite_check_sec','metrics_sec','checkpoint_sec','other_sec']
print(f"whole step {s['wall_sec']*1e3:.4f} ms = parts {sum(s[p] for p in parts)*1e3:.4f} ms")
