"""Time inside allocation calls made from a Python stack of a given depth, with bench/calltime.c preloaded in front of each optmem library named (trace and plan mode), interleaved; prints a table of medians: what reading the Python frames costs a request."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import calltime

# The program: DEPTH nested Python frames, then CALLS bytearray(SIZE), each freed by the next;
# with EVICT, a scan of EVICT bytes after each (no allocation), so that each request finds the
# lines it reads evicted, as in a program whose work streams through memory between requests.
PROGRAM = r'''
import sys
depth, calls, size, evict = (int(a) for a in sys.argv[1:5])
scratch = bytes(evict)


def loop():
    for _ in range(calls):
        b = bytearray(size)
        if evict:
            scratch.find(b"\x01")
    return b


def nest(d):
    return nest(d - 1) if d > 1 else loop()


nest(depth)
'''


def run_once(args, lib, mode, calltime_lib, tmp, tag):
    """Median, p99 and count of the allocation calls of one run; None when it failed."""
    outdir = Path(tmp) / tag
    outdir.mkdir()
    env = dict(os.environ, LD_PRELOAD="%s:%s" % (calltime_lib, lib), OPTMEM_MODE=mode,
               OPTMEM_REPORT="", CALLTIME_OUT=str(outdir / "%p.json"),
               CALLTIME_MIN_BYTES=str(args.size))
    proc = subprocess.run([args.python, "-c", PROGRAM, str(args.depth), str(args.calls),
                           str(args.size), str(args.evict)], env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    reports = [json.loads(p.read_text()) for p in outdir.glob("*.json")]
    for p in outdir.glob("*.json"):
        p.unlink()
    outdir.rmdir()
    if proc.returncode != 0 or len(reports) != 1:
        sys.stderr.write("%s failed (%d): %s\n" % (tag, proc.returncode, proc.stderr[-2000:]))
        return None
    s = calltime.summary_of(reports[0])
    return {"p50": s["alloc_p50_ns"], "p99": s["alloc_p99_ns"], "calls": s["alloc_calls"],
            "ms": s["alloc_ms"]}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lib", action="append", required=True, metavar="NAME=PATH",
                   help="an optmem library to measure (repeatable: before=..., after=...)")
    p.add_argument("--modes", default="trace,plan", help="OPTMEM_MODE values (default trace,plan)")
    p.add_argument("--depth", type=int, default=20, help="Python frames above the request")
    p.add_argument("--calls", type=int, default=100000, help="requests per run")
    p.add_argument("--size", type=int, default=65536, help="bytes per request")
    p.add_argument("--evict", type=int, default=0, metavar="BYTES",
                   help="bytes read after each request, evicting what it read (default 0)")
    p.add_argument("--runs", type=int, default=5, help="interleaved runs of each (default 5)")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--cc", default=os.environ.get("CC", "cc"))
    p.add_argument("--calltime-lib", help="use this calltime.so instead of building one")
    p.add_argument("--timeout", type=int, default=300)
    args = p.parse_args()
    libs = [tuple(x.split("=", 1)) for x in args.lib]
    modes = args.modes.split(",")
    results = {(n, m): [] for n, _ in libs for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        lib = args.calltime_lib
        if not lib:
            lib = str(Path(tmp) / "calltime.so")
            calltime.build(args.cc, lib)
        for run in range(args.runs):
            for name, path in libs:
                for mode in modes:
                    tag = "%s-%s-%d" % (name, mode, run)
                    r = run_once(args, os.path.abspath(path), mode, lib, tmp, tag)
                    sys.stderr.write("[%s] %s\n" % (tag, r))
                    if r:
                        results[(name, mode)].append(r)
    print("| library | mode | runs | alloc calls | alloc median (ns) | alloc p99 (ns) | "
          "time inside allocs (ms) |")
    print("|---|---|---|---|---|---|---|")
    failed = False
    for name, _ in libs:
        for mode in modes:
            rs = results[(name, mode)]
            failed |= len(rs) != args.runs
            if not rs:
                print("| %s | %s | 0 | – | – | – | – |" % (name, mode))
                continue
            print("| %s | %s | %d | %d | ≤%d | ≤%d | %.1f |" % (
                name, mode, len(rs), statistics.median(r["calls"] for r in rs),
                statistics.median(r["p50"] for r in rs), statistics.median(r["p99"] for r in rs),
                statistics.median(r["ms"] for r in rs)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
