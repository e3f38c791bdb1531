#!/usr/bin/env python3
"""Summarise an `ncu --csv --page raw` run of a short decode bench (GPU
machine, run by gpu-session.sh): the kernels after the last prefill kernel
(the decode steps plus the prefill's last-token tail: the output norm and
LM head) grouped by name, per decode step (steps = GET_ROWS launches / 2), with
their time, DRAM bytes, achieved GB/s and occupancy.  Usage:
    ncu-summary.py FILE.csv [prefill-kernel-regex]"""
import csv, re, sys, collections

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
rd = csv.DictReader(lines)
for r in rd:
    rows.append(r)
if not rows:
    print("ncu-summary: no kernel rows"); sys.exit(1)
if "Metric Name" in rows[0]:
    piv = collections.OrderedDict()
    for r in rows:
        k = r["ID"]
        d = piv.setdefault(k, {"Kernel Name": r["Kernel Name"], "ID": k})
        d[r["Metric Name"]] = r["Metric Value"]
    rows = [v for v in piv.values() if v["ID"].isdigit()]
else:
    rows = [r for r in rows if r.get("ID", "").isdigit()]

def num(r, k):
    v = r.get(k, "0").replace(",", "")
    try:
        return float(v)
    except ValueError:
        return 0.0

pre = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"mma2?_kernel|fa_kernel|chunk_kernel|moe|attn_mma")
last = -1
for i, r in enumerate(rows):
    if pre.search(r["Kernel Name"]):
        last = i
dec = rows[last + 1:]
# a decode step runs GET_ROWS twice (token embeddings, then the rows whose
# logits are wanted); the prefill's own last GET_ROWS falls after its last
# prefill kernel too, so the kernels listed are steps plus that tail
steps = sum(1 for r in dec if "get_rows_kernel" in r["Kernel Name"]) // 2 or 1
agg = collections.OrderedDict()
for r in dec:
    name = re.sub(r"\(.*", "", r["Kernel Name"])[:60]
    a = agg.setdefault(name, [0, 0.0, 0.0, 0.0, 0.0])
    a[0] += 1
    a[1] += num(r, "gpu__time_duration.sum")
    a[2] += num(r, "dram__bytes_read.sum")
    a[3] += num(r, "sm__warps_active.avg.pct_of_peak_sustained_active")
    a[4] = num(r, "launch__registers_per_thread")
tot = sum(a[1] for a in agg.values())
print(f"ncu: {len(dec)} decode kernels, {steps} steps; {tot / steps / 1e3:.1f} us of kernel time a step")
print(f"{'kernel':60s} {'n/step':>7s} {'us/step':>9s} {'share':>6s} {'GB/s':>7s} {'occ%':>5s} {'regs':>4s}")
for name, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    gbs = a[2] / a[1] if a[1] > 0 else 0.0   # bytes per ns = GB/s
    print(f"{name:60s} {a[0] / steps:7.1f} {a[1] / steps / 1e3:9.1f} {100 * a[1] / tot:5.1f}% {gbs:7.0f} "
          f"{a[3] / a[0]:5.1f} {a[4]:4.0f}")
