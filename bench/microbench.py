"""Build bench/microbench.c and print nanoseconds per malloc+free pair under glibc, optmem trace and optmem plan (medians of interleaved runs)."""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import peers

SOURCE = Path(__file__).resolve().parent / "microbench.c"
# Names from peers.ALLOCATORS: "optmem" is plan mode.
DEFAULT_ALLOCATORS = "glibc,optmem-trace,optmem"
CASES = ("small", "managed")


def build(cc, out):
    """Compile the microbenchmark the way bench/README.md says."""
    cmd = [cc, "-O2", str(SOURCE), "-o", str(out), "-lpthread"]
    peers.log("building: " + " ".join(cmd))
    subprocess.run(cmd, check=True)


def run_once(binary, case, alloc, args, tmpdir, tag):
    """One microbenchmark process; returns {ns, served_share} or {error}."""
    env = peers.base_env()
    if alloc["path"]:
        env["LD_PRELOAD"] = alloc["path"]
    env.update(alloc["env"])
    report = Path(tmpdir) / (tag + ".json")
    if alloc["optmem"]:
        env["OPTMEM_REPORT"] = str(report)
    cmd = [str(binary), case, str(args.iterations), str(args.warmup), str(args.threads),
           str(args.small_bytes)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    rec = {"case": case, "allocator": alloc["name"], "ns": None, "served_share": None, "error": None}
    fields = proc.stdout.split()
    if proc.returncode != 0 or "ns_per_pair" not in fields:
        rec["error"] = "exit %d: %s" % (proc.returncode, proc.stderr.strip()[-300:])
        return rec
    rec["ns"] = float(fields[fields.index("ns_per_pair") + 1])
    if report.is_file():
        rec["served_share"], _ = peers.serving_of(json.loads(report.read_text()))
        report.unlink()
    return rec


def parse_args():
    """Command line of the driver."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--allocators", default=DEFAULT_ALLOCATORS,
                   help="names from bench/peers.py's table (default %(default)s)")
    p.add_argument("--cases", default=",".join(CASES), help="small, managed (default both)")
    p.add_argument("--runs", type=int, default=5, help="interleaved runs of each (default 5)")
    p.add_argument("--iterations", type=int, default=200000,
                   help="timed iterations of 8 pairs each (default %(default)s)")
    p.add_argument("--warmup", type=int, default=2000,
                   help="untimed iterations first: plan mode detects and plans here (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="threads, each running the loop (default 1)")
    p.add_argument("--small-bytes", type=int, default=64, help="size of the small case (default 64)")
    p.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler (default cc)")
    p.add_argument("--binary", help="use this microbench binary instead of building one")
    p.add_argument("--build-dir", default="build",
                   help="optmem build directory, relative to the repo unless absolute (default %(default)s)")
    p.add_argument("--optmem-lib", default=None,
                   help="optmem library (default BUILD_DIR/preload/liboptmem.so)")
    p.add_argument("--optmem-env", action="append", default=[], metavar="KEY=VAL",
                   help="extra environment for every optmem entry (repeatable)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run before giving up")
    p.add_argument("--json", help="write every run and the summary here")
    args = p.parse_args()
    if args.runs < 1 or args.iterations < 1 or args.warmup < 0:
        p.error("--runs and --iterations must be at least 1, --warmup at least 0")
    return args


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    allocs = peers.select_allocators(args.allocators.split(","), args)
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            raise SystemExit("unknown case %r (known: %s)" % (c, ", ".join(CASES)))
    records = []
    with tempfile.TemporaryDirectory(prefix="optmem-micro-") as tmpdir:
        binary = Path(args.binary) if args.binary else Path(tmpdir) / "microbench"
        if not args.binary:
            build(args.cc, binary)
        total, n = args.runs * len(cases) * len(allocs), 0
        # Interleaved as in peers.py, so drift of the machine spreads over all rows.
        for r in range(args.runs):
            for c in cases:
                for a in allocs:
                    n += 1
                    rec = run_once(binary, c, a, args, tmpdir, "%s-%s-%d" % (c, a["name"], r))
                    rec["run"] = r
                    records.append(rec)
                    peers.log("[%d/%d] run %d/%d %-8s %-12s %s" % (
                        n, total, r + 1, args.runs, c, a["name"],
                        rec["error"] or "%.1f ns/pair" % rec["ns"]))
    rows = []
    for c in cases:
        base = None
        for a in allocs:
            mine = [x for x in records if x["case"] == c and x["allocator"] == a["name"]]
            ns = [x["ns"] for x in mine if x["ns"] is not None]
            med = statistics.median(ns) if ns else None
            if a["name"] == peers.BASELINE:
                base = med
            rows.append({"case": c, "allocator": a["name"], "runs_ok": len(ns),
                         "runs_failed": len(mine) - len(ns), "ns_median": med,
                         "ns_min": min(ns) if ns else None, "ns_max": max(ns) if ns else None,
                         "vs_glibc": peers.ratio(med, base),
                         "served_share": peers.median_of(x["served_share"] for x in mine)})
    size = {"small": "%d B" % args.small_bytes, "managed": "64-256 KiB, 8 sizes, one call site"}
    print("Medians of %d interleaved run(s); %d timed iterations of 8 pairs after %d untimed; "
          "%d thread(s).\n" % (args.runs, args.iterations, args.warmup, args.threads))
    print("| case | sizes | allocator | ns per malloc+free (median) | min | max | vs glibc | served from plan |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["case"], size[r["case"]],
            r["allocator"] + (" (%d failed)" % r["runs_failed"] if r["runs_failed"] else ""),
            peers.fmt(r["ns_median"], ".1f"), peers.fmt(r["ns_min"], ".1f"),
            peers.fmt(r["ns_max"], ".1f"), peers.fmt(r["vs_glibc"], ".2f"),
            peers.fmt(r["served_share"], ".3f")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": sys.argv, "runs": records, "summary": rows}, f, indent=1)
    return 1 if any(x["error"] for x in records) else 0


if __name__ == "__main__":
    sys.exit(main())
