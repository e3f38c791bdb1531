#!/usr/bin/env python3
"""Summarise an `ncu --csv --page raw` log by kernel name: launches, total
time, share, mean time, and the mean SM / DRAM throughput (% of peak) when
those metrics were collected.  Usage: ncu-kernels.py FILE.csv [TOP]
(GPU machine, gpu-session.sh's ncu_pre_* steps: where a prefill's time
goes, kernel by kernel, without the graph)."""
import csv, sys, collections

top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
rows = list(csv.DictReader(lines))
if not rows:
    print("ncu-kernels: no kernel rows"); sys.exit(1)

def num(r, k):
    try:
        return float(r.get(k, "0").replace(",", ""))
    except ValueError:
        return 0.0

T = "gpu__time_duration.sum"
S = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
D = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
if "Metric Name" in rows[0]:   # one row per (kernel, metric)
    piv = collections.OrderedDict()
    for r in rows:
        d = piv.setdefault(r["ID"], {"Kernel Name": r["Kernel Name"]})
        d[r["Metric Name"]] = r["Metric Value"]
    rows = list(piv.values())
else:
    rows = [r for r in rows if r.get("ID", "").isdigit()]
unit = 1e-3   # ns -> us
agg = collections.OrderedDict()
tot = 0.0
for r in rows:
    name = r["Kernel Name"].split("(")[0]
    t = num(r, T) * unit
    a = agg.setdefault(name, [0, 0.0, 0.0, 0.0])
    a[0] += 1; a[1] += t; a[2] += num(r, S) * t; a[3] += num(r, D) * t
    tot += t
print("%d kernels, %.1f us in all" % (len(rows), tot))
print("%-60s %6s %11s %6s %9s %5s %5s" % ("kernel", "count", "total us", "share", "us/launch", "sm%", "dram%"))
for name, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
    w = a[1] if a[1] > 0 else 1.0
    print("%-60s %6d %11.1f %5.1f%% %9.1f %5.1f %5.1f" % (name[:60], a[0], a[1], 100.0 * a[1] / tot, a[1] / a[0],
                                                        a[2] / w, a[3] / w))
