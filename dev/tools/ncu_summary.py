"""Per-kernel time table from an ncu CSV (--csv --metrics gpu__time_duration.sum).

usage: python3 dev/tools/ncu_summary.py ncu.csv [steps]
Groups the launches by kernel name (template arguments dropped) and grid, and
prints, largest first: launches per step, time per step (us), share of the total.
`steps` divides the counts and times (the number of profiled decode steps).
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*", "", name)          # argument list
    depth, out = 0, []
    for ch in name:                            # template arguments
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">"
    return "".join(out).replace("void ", "")


def main():
    path = sys.argv[1]
    steps = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    rows = csv.DictReader(lines[start:])
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "")
        us = v / 1e3 if unit in ("nsecond", "ns") else v * 1e3 if unit in ("msecond", "ms") else v
        key = (short(r["Kernel Name"]), r["Grid Size"], r["Block Size"])
        tot[key] += us
        cnt[key] += 1
    total = sum(tot.values())
    print(f"{'kernel':58s} {'grid':>16s} {'block':>12s} {'n/step':>7s} {'us/step':>9s} {'share':>6s}")
    for k in sorted(tot, key=tot.get, reverse=True):
        print(f"{k[0][:58]:58s} {k[1]:>16s} {k[2]:>12s} {cnt[k] / steps:7.1f} {tot[k] / steps:9.1f} "
              f"{tot[k] / total:6.1%}")
    print(f"{'total':58s} {'':>16s} {'':>12s} {sum(cnt.values()) / steps:7.1f} {total / steps:9.1f}")


if __name__ == "__main__":
    main()
