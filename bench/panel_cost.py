"""Time and peak RSS of programs nobody here wrote (the hardening panel's: scikit-learn, XGBoost, skorch, torchaudio, fastText, torchvision, darknet) under glibc, the peers and optmem, interleaved, with medians and ratios to glibc.

The programs are tests/hardening/panel.py's, which checks that their output is the same
under optmem; this measures what they pay for it: wall time, CPU time (user + system of
the whole process tree) and peak RSS (the largest process's, from wait4), each a median
of interleaved runs. Usage:

    /usr/bin/python3 bench/panel_cost.py [--programs sklearn,xgboost,...] [--allocators glibc,tcmalloc,optmem]
        [--runs N] [--build-dir DIR] [--optmem-lib PATH] [--optmem-env KEY=VAL ...]
        [--also-optmem LABEL=PATH ...]

--also-optmem adds a row "optmem@LABEL" that preloads another build of liboptmem.so (an
earlier commit's, say) in plan mode, interleaved with the others, so that two builds are
compared on the same machine at the same time.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests" / "hardening"))
from panel import PROGRAMS  # noqa: E402
from peers import ALLOCATORS, base_env, log, parse_env_pairs, resolve_preload  # noqa: E402

DEFAULT_ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "optmem")
MIB = 1 << 20


def run_once(argv, env, cwd):
    """Runs argv; returns (exit status, wall s, CPU s, peak RSS in bytes)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def spec_of(alloc):
    """The bench/peers.py entry of an allocator; optmem@LABEL is optmem's."""
    return ALLOCATORS["optmem" if alloc.startswith("optmem@") else alloc]


def environment(alloc, preload, extra):
    env = base_env()
    env["OMP_NUM_THREADS"] = "1"
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(spec_of(alloc)["env"])
    if spec_of(alloc).get("optmem"):
        env.update(extra)
    return env


def median(values):
    return statistics.median(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--allocators", default=",".join(DEFAULT_ALLOCATORS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--optmem-lib")
    ap.add_argument("--optmem-env", nargs="*", default=[])
    ap.add_argument("--also-optmem", action="append", default=[], metavar="LABEL=PATH",
                    help="another liboptmem.so, measured as the row optmem@LABEL")
    args = ap.parse_args()
    programs = args.programs.split(",")
    allocs = args.allocators.split(",")
    for name in programs:
        if name not in PROGRAMS:
            ap.error(f"unknown program {name!r} (known: {', '.join(PROGRAMS)})")
    for name in allocs:
        if name not in ALLOCATORS or ALLOCATORS[name].get("saved_plan"):
            ap.error(f"unknown allocator {name!r}")
    if "glibc" not in allocs:
        allocs.insert(0, "glibc")
    optmem_lib = args.optmem_lib or os.path.join(args.build_dir, "preload", "liboptmem.so")
    also = {}
    for item in args.also_optmem:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            ap.error(f"--also-optmem takes LABEL=PATH, not {item!r}")
        also["optmem@" + label] = path
        allocs.append("optmem@" + label)
    try:
        preloads = {a: resolve_preload(a, spec_of(a), also.get(a, optmem_lib)) for a in allocs}
    except FileNotFoundError as e:
        sys.exit(f"panel.py: {e}")
    extra = parse_env_pairs(args.optmem_env)
    results = {(p, a): [] for p in programs for a in allocs}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in programs:
            if PROGRAMS[p][1]:
                PROGRAMS[p][1](tmp)
        for r in range(args.runs):
            for p in programs:
                for a in allocs:
                    rc, wall, cpu, rss = run_once(PROGRAMS[p][0](tmp),
                                                  environment(a, preloads[a], extra), tmp)
                    log(f"run {r + 1}/{args.runs} {p} {a}: exit {rc}, {wall:.2f} s, "
                        f"{cpu:.2f} s CPU, {rss / MIB:.1f} MiB")
                    if rc != 0:
                        failed.append(f"{p} under {a}: exit {rc}")
                        continue
                    results[(p, a)].append((wall, cpu, rss))
    print(f"Medians of {args.runs} interleaved run(s); OMP_NUM_THREADS=1.\n")
    print("| program | allocator | wall s | CPU s | peak RSS MiB | wall vs glibc "
          "| CPU vs glibc | peak RSS vs glibc |")
    print("|---|---|---|---|---|---|---|---|")
    for p in programs:
        base = [median([x[i] for x in results[(p, "glibc")]]) for i in range(3)]
        for a in allocs:
            m = [median([x[i] for x in results[(p, a)]]) for i in range(3)]
            cells = [f"{v:.2f}" if v is not None else "–" for v in (m[0], m[1])]
            cells.append(f"{m[2] / MIB:.1f}" if m[2] is not None else "–")
            cells += [f"{v / b:.3f}" if v is not None and b else "–" for v, b in zip(m, base)]
            print(f"| {p} | {a} | " + " | ".join(cells) + " |")
    for f in failed:
        print("FAILED:", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
