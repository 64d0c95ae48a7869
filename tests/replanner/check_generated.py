#!/usr/bin/env python3
"""Generates instances (gen_instances.py, fixed seeds) and checks what `optmem plan -o` makes of
them on its own terms: every offset aligned, no two buffers live at once share a byte, the
peak the one printed, LB <= peak <= greedy by size's, and LB the generator's."""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# (kind, buffers, seed): seeds below 100; the benchmark's start at 1000.
CASES = [("perfect", 60, 1), ("perfect", 250, 2), ("crowded", 300, 3), ("crowded", 120, 4),
         ("cyclic", 80, 5), ("cyclic", 200, 6), ("loop", 120, 7), ("loop", 400, 8)]


def live_together(a, b, period):
    if a[0] < b[1] and b[0] < a[1]:
        return True
    if not period:
        return False
    return (a[0] + period < b[1] and b[0] < a[1] + period) or \
           (b[0] + period < a[1] and a[0] < b[1] + period)


def check(optmem, kind, n, seed, tmp, budget_ms):
    src = os.path.join(tmp, "%s-%d-%d.csv" % (kind, n, seed))
    out = src + ".plan"
    gen = subprocess.run([sys.executable, os.path.join(HERE, "gen_instances.py"), kind, "--n",
                          str(n), "--seed", str(seed), "-o", src],
                         capture_output=True, text=True, check=True)
    meta = json.loads(gen.stdout)
    res = subprocess.run([optmem, "plan", src, "--budget-ms", str(budget_ms), "--period",
                          str(meta["period"]), "-o", out], capture_output=True, text=True)
    if res.returncode != 0:
        return "optmem plan failed: " + res.stderr.strip()
    printed = {k: int(re.search(r"^%s:\s+(\d+)" % k, res.stdout, re.M).group(1))
               for k in ("lower bound", "peak", "greedy", "buffers", "proven")}
    with open(out) as f:
        rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if len(rows) != n or printed["buffers"] != n:
        return "%d rows planned, %d printed, %d generated" % (len(rows), printed["buffers"], n)
    peak = 0
    for r in rows:
        if r.get("alignment", 0) > 1 and r["offset"] % r["alignment"]:
            return "buffer %d at %d, not aligned to %d" % (r["id"], r["offset"], r["alignment"])
        peak = max(peak, r["offset"] + r["size"])
    spans = [(r["lower"], r["upper"], r["offset"], r["offset"] + r["size"], r["id"])
             for r in sorted(rows, key=lambda r: r["offset"])]
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            if b[2] >= a[3]:
                break  # by offset: every later one starts above a's end
            if live_together(a, b, meta["period"]):
                return "buffers %d and %d share bytes while both live" % (a[4], b[4])
    if peak != printed["peak"]:
        return "peak printed %d, plan's %d" % (printed["peak"], peak)
    if printed["lower bound"] != meta["lb"]:
        return "LB printed %d, generator's %d" % (printed["lower bound"], meta["lb"])
    if not meta["lb"] <= peak <= printed["greedy"]:
        return "peak %d outside [LB %d, greedy %d]" % (peak, meta["lb"], printed["greedy"])
    # the generator's optimum is a plan's peak: no proven bound above it, no plan below it
    if meta["optimum"] is not None and not printed["proven"] <= meta["optimum"] <= peak:
        return "optimum %d outside [proven %d, peak %d]" % (meta["optimum"], printed["proven"],
                                                            peak)
    print("%-8s n=%-4d seed=%-3d LB %d peak %.4f greedy %.4f optimum %s x LB" %
          (kind, n, seed, meta["lb"], peak / meta["lb"], printed["greedy"] / meta["lb"],
           "%.4f" % (meta["optimum"] / meta["lb"]) if meta["optimum"] else "-"))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--optmem", required=True)
    ap.add_argument("--budget-ms", type=int, default=100)
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind, n, seed in CASES:
            err = check(a.optmem, kind, n, seed, tmp, a.budget_ms)
            if err:
                print("FAIL %s n=%d seed=%d: %s" % (kind, n, seed, err))
                failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
