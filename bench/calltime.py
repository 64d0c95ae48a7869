"""Time the allocation calls of >= 4 KiB (and their frees) of the bundled workloads under each allocator, with bench/calltime.c preloaded in front of it, interleaved, and print a table of medians."""

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

SOURCE = Path(__file__).resolve().parent / "calltime.c"
DEFAULT_WORKLOADS = "cnn_bn_adam,transformer_adamw,numpy_mlp"
DEFAULT_ALLOCATORS = "glibc,jemalloc,tcmalloc,mimalloc,optmem,optmem-trace"
ALLOC_KINDS = ("malloc", "calloc", "realloc", "aligned")
# Calls counted as slow: the first histogram bucket wholly above 1 ms starts at 2^20 ns.
SLOW_NS = 1 << 20


def build(cc, out):
    """Compile the interposer the way bench/README.md says."""
    cmd = [cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", str(SOURCE), "-o", str(out),
           "-ldl", "-pthread"]
    peers.log("building: " + " ".join(cmd))
    subprocess.run(cmd, check=True)


def quantile(hist, q):
    """Upper bound (ns) of the histogram bucket that holds quantile q, None when empty.

    hist: [[low, high, count], ...] in ascending order, as calltime writes it.
    """
    count = sum(c for _, _, c in hist)
    if count == 0:
        return None
    rank, seen = max(1, -(-count * q // 1)), 0
    for _, high, c in hist:
        seen += c
        if seen >= rank:
            return high
    return hist[-1][1]


def merge(hists):
    """Sum histograms bucket by bucket."""
    out = {}
    for hist in hists:
        for low, high, c in hist:
            prev = out.get(low, (high, 0))
            out[low] = (high, prev[1] + c)
    return [[low, high, c] for low, (high, c) in sorted(out.items())]


def kinds_summary(kinds, prefix=""):
    """Counts, medians, p99 and the longest call of one set of histograms (report["kinds"] or
    report["phase"]), its keys prefixed."""
    alloc_hist = merge(kinds[k]["hist"] for k in ALLOC_KINDS)
    free = kinds["free"]
    return {prefix + k: v for k, v in {
        "alloc_calls": sum(kinds[k]["count"] for k in ALLOC_KINDS),
        "free_calls": free["count"],
        "alloc_p50_ns": quantile(alloc_hist, 0.5),
        "alloc_p99_ns": quantile(alloc_hist, 0.99),
        "free_p50_ns": quantile(free["hist"], 0.5),
        "free_p99_ns": quantile(free["hist"], 0.99),
        "max_ns": max(kinds[k]["max_ns"] for k in kinds),
    }.items()}


def phase_summary(phase):
    """The same of the calls after the workload's phase mark (report["phase"]), or Nones."""
    if not phase:
        return {k: None for k in PHASE_COLUMNS}
    return kinds_summary(phase, "train_")


def summary_of(report):
    """What the table needs from one calltime report."""
    kinds = report["kinds"]
    alloc_hist = merge(kinds[k]["hist"] for k in ALLOC_KINDS)
    free = kinds["free"]
    return dict(phase_summary(report.get("phase")), **kinds_summary(kinds), **{
        "alloc_ms": sum(kinds[k]["total_ns"] for k in ALLOC_KINDS) / 1e6,
        "free_ms": free["total_ns"] / 1e6,
        "slow_calls": sum(c for k in kinds for low, _, c in kinds[k]["hist"] if low >= SLOW_NS),
        "alloc_hist": alloc_hist,
        "free_hist": free["hist"],
        "timer_overhead_ns": report["timer_overhead_ns"],
        "untracked_large": report["untracked_large"],
        "slow": report.get("slow", []),
        "phase_mark_ms": report.get("phase_mark_ms"),
    })


def workload_report(outdir):
    """The calltime report of the workload process itself (its parent is this script), or None.

    Programs the workload starts (ldconfig through ctypes, ...) write reports of their own.
    """
    for path in sorted(outdir.glob("*.json")):
        report = json.loads(path.read_text())
        if report.get("ppid") == os.getpid():
            return report
    return None


def run_once(workload, alloc, args, calltime_lib, tmpdir, tag):
    """One workload run under calltime + one allocator; peers.run_once's record plus calltime's."""
    outdir = Path(tmpdir) / tag
    outdir.mkdir()
    env = dict(alloc["env"], CALLTIME_OUT=str(outdir / "%p.json"),
               CALLTIME_MIN_BYTES=str(args.min_bytes))
    if args.slow_us:
        env["CALLTIME_SLOW_US"] = str(args.slow_us)
    env["CALLTIME_MARK_STEP"] = str(args.mark_step)
    preload = str(calltime_lib) + (":" + alloc["path"] if alloc["path"] else "")
    rec = peers.run_once(workload, dict(alloc, path=preload, env=env), args, tmpdir, tag)
    rec["calltime"] = None
    if rec["error"] is None:
        report = workload_report(outdir)
        if report is None:
            rec["error"] = "no calltime report in %s" % outdir
        else:
            rec["calltime"] = summary_of(report)
    for path in outdir.glob("*.json"):
        path.unlink()
    outdir.rmdir()
    return rec


# The calls after tests/workloads/common.py's phase mark (the steps from --mark-step on).
PHASE_COLUMNS = ("train_alloc_calls", "train_free_calls", "train_alloc_p50_ns", "train_alloc_p99_ns",
                 "train_free_p50_ns", "train_free_p99_ns", "train_max_ns")
COLUMNS = ("alloc_calls", "free_calls", "alloc_ms", "free_ms", "alloc_p50_ns", "alloc_p99_ns",
           "free_p50_ns", "free_p99_ns", "max_ns", "slow_calls") + PHASE_COLUMNS


def summarize(records, workloads, allocs):
    """One row of medians per (workload, allocator)."""
    rows = []
    for w in workloads:
        runs_of = {a["name"]: [r for r in records if r["workload"] == w["name"] and r["allocator"] == a["name"]]
                   for a in allocs}
        base = [r for r in runs_of.get(peers.BASELINE, []) if r["calltime"]]
        reference = base[0]["result"]["losses"] if base else None
        for a in allocs:
            mine = runs_of[a["name"]]
            ok = [r for r in mine if r["calltime"]]
            row = {"workload": w["name"], "allocator": a["name"], "runs_ok": len(ok),
                   "runs_failed": len(mine) - len(ok)}
            for key in COLUMNS:
                row[key] = peers.median_of(r["calltime"][key] for r in ok)
            row["max_ns_of_runs"] = max((r["calltime"]["max_ns"] for r in ok), default=None)
            row["steps_per_s"] = peers.median_of(r["result"].get("steady_steps_per_s") for r in ok)
            row["wall_s"] = peers.median_of(r["wall_s"] for r in ok)
            row["served_share"] = peers.median_of(r["served_share"] for r in ok)
            row["output"] = peers.output_check(ok, reference) if a["name"] != peers.BASELINE else "reference"
            row["other_cpu_max"] = max((r["other_cpu_cores"] for r in mine), default=None)
            row["untracked_large"] = max((r["calltime"]["untracked_large"] for r in ok), default=0)
            rows.append(row)
    return rows


def fmt_ns(ns, bound=False):
    """ns, µs or ms with 2-3 significant digits; bound: a histogram bucket's upper bound."""
    if ns is None:
        return "–"
    prefix = "≤" if bound else ""
    if ns < 1000:
        return "%s%d ns" % (prefix, ns)
    if ns < 1000000:
        return "%s%.3g µs" % (prefix, ns / 1e3)
    return "%s%.3g ms" % (prefix, ns / 1e6)


def fmt_count(n):
    """Calls, in thousands above 10000."""
    if n is None:
        return "–"
    return "%.1fk" % (n / 1e3) if n >= 10000 else "%d" % n


def markdown_table(rows, min_bytes, mark_step):
    """The table, one row per (workload, allocator)."""
    t = "steps ≥ %d" % mark_step
    head = ("| workload | allocator | allocs ≥ %s | frees of them | time inside allocs (ms) | "
            "inside frees (ms) | alloc median | alloc p99 | free median | free p99 | "
            "allocs, %s | alloc median, %s | alloc p99, %s | free median, %s | free p99, %s | "
            "max call, %s | max call "
            "(median of runs) | max call (any run) | calls ≥ 1.05 ms | steady steps/s | wall (s) | served from plan | "
            "output vs glibc | others' CPU, max (cores) |" % (
                ("%d KiB" % (min_bytes // 1024) if min_bytes % 1024 == 0 else "%d B" % min_bytes),
                t, t, t, t, t, t))
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        name = r["allocator"] + (" (%d failed)" % r["runs_failed"] if r["runs_failed"] else "")
        lines.append("| %s |" % " | ".join([
            r["workload"], name, fmt_count(r["alloc_calls"]), fmt_count(r["free_calls"]),
            peers.fmt(r["alloc_ms"], ".1f"), peers.fmt(r["free_ms"], ".1f"),
            fmt_ns(r["alloc_p50_ns"], True), fmt_ns(r["alloc_p99_ns"], True),
            fmt_ns(r["free_p50_ns"], True), fmt_ns(r["free_p99_ns"], True),
            fmt_count(r["train_alloc_calls"]), fmt_ns(r["train_alloc_p50_ns"], True),
            fmt_ns(r["train_alloc_p99_ns"], True), fmt_ns(r["train_free_p50_ns"], True),
            fmt_ns(r["train_free_p99_ns"], True), fmt_ns(r["train_max_ns"]),
            fmt_ns(r["max_ns"]), fmt_ns(r["max_ns_of_runs"]), peers.fmt(r["slow_calls"], ".0f"), peers.fmt(r["steps_per_s"], ".2f"),
            peers.fmt(r["wall_s"], ".1f"), peers.fmt(r["served_share"], ".3f"), r["output"],
            peers.fmt(r["other_cpu_max"], ".2f")]))
    return "\n".join(lines)


def parse_args():
    """Command line of the driver."""
    p = argparse.ArgumentParser(description=__doc__)
    peers.add_common_args(p)
    p.set_defaults(allocators=DEFAULT_ALLOCATORS)
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                   help="names from bench/peers.py's table (default %(default)s)")
    p.add_argument("--steps", type=int, default=16,
                   help="steps of every Python workload (default %(default)s)")
    p.add_argument("--min-bytes", type=int, default=4096,
                   help="time calls of at least this many bytes (CALLTIME_MIN_BYTES, default %(default)s)")
    p.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler (default cc)")
    p.add_argument("--calltime-lib", help="use this calltime.so instead of building one")
    p.add_argument("--mark-step", type=int, default=3,
                   help="the training columns time the calls from this step on (CALLTIME_MARK_STEP, "
                        "read by tests/workloads/common.py; default %(default)s, the first step its "
                        "steady steps/s counts)")
    p.add_argument("--also-optmem", action="append", default=[], metavar="LABEL=PATH",
                   help="another build of liboptmem.so, run in plan mode as the row optmem@LABEL, "
                        "interleaved with the others (a commit before against one after)")
    p.add_argument("--slow-us", type=int, default=0,
                   help="log each call of at least this many µs with its caller's stack, CPU time "
                        "and page faults (CALLTIME_SLOW_US; adds two system calls to every timed call)")
    args = p.parse_args()
    if args.runs < 1 or args.steps < 1 or args.min_bytes < 0 or args.slow_us < 0:
        p.error("--runs and --steps must be at least 1, --min-bytes at least 0")
    if not 0 <= args.mark_step < args.steps:
        p.error("--mark-step must be a step of the run, 0 to --steps - 1")
    for item in args.also_optmem:
        label, sep, path = item.partition("=")
        if not sep or not label or not path or not Path(path).is_file():
            p.error("--also-optmem takes LABEL=PATH of a library that exists, not %r" % item)
    return args


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    allocs = peers.select_allocators(args.allocators.split(","), args)
    for item in args.also_optmem:
        label, _, path = item.partition("=")
        plan = peers.select_allocators(["optmem"], args)[0]
        allocs.append(dict(plan, name="optmem@" + label, path=str(Path(path).resolve())))
    workloads = peers.select_workloads(args.workloads, args.build_dir)
    records = []
    with tempfile.TemporaryDirectory(prefix="optmem-calltime-") as tmpdir:
        lib = Path(args.calltime_lib).resolve() if args.calltime_lib else Path(tmpdir) / "calltime.so"
        if not args.calltime_lib:
            build(args.cc, lib)
        total, n = args.runs * len(workloads) * len(allocs), 0
        # Interleaved as in peers.py, so that drift of the machine spreads over all rows.
        for r in range(args.runs):
            for w in workloads:
                for a in allocs:
                    n += 1
                    rec = run_once(w, a, args, lib, tmpdir, "%s-%s-%d" % (w["name"], a["name"], r))
                    rec["run"] = r
                    records.append(rec)
                    ct = rec["calltime"]
                    peers.log("[%d/%d] run %d/%d %-18s %-13s %s" % (
                        n, total, r + 1, args.runs, w["name"], a["name"], rec["error"] or (
                            "%d allocs %.1f ms, %d frees %.1f ms, max %s, %.1f s, others %.2f cores" % (
                                ct["alloc_calls"], ct["alloc_ms"], ct["free_calls"], ct["free_ms"],
                                fmt_ns(ct["max_ns"]), rec["wall_s"], rec["other_cpu_cores"]))))
                    for slow in (ct["slow"] if ct else []):
                        peers.log("    slow %s of %d B: %s, CPU %s, %d faults, at %.0f ms, %s; %s" % (
                            slow["kind"], slow["size"], fmt_ns(slow["ns"]), fmt_ns(slow["cpu_ns"]),
                            slow["minflt"], slow["at_ms"],
                            "main thread" if slow["main_thread"] else "thread %d" % slow["tid"],
                            " < ".join(slow["frames"][:6])))
    rows = summarize(records, workloads, allocs)
    mark_step = args.mark_step
    print("Medians of %d interleaved run(s); %d steps; threads=%d; calls of >= %d bytes timed with "
          "CLOCK_MONOTONIC (the clock's own cost, ~%s, is inside every figure); median and p99 "
          "are upper bounds of histogram buckets (12.5 %% wide); the \"steps ≥ %d\" columns are "
          "the calls made from step %d on (the workload's phase mark), the others the whole "
          "process's.\n" % (
              args.runs, args.steps, args.threads, args.min_bytes,
              fmt_ns(peers.median_of(r["calltime"]["timer_overhead_ns"] for r in records if r["calltime"])),
              mark_step, mark_step))
    print(markdown_table(rows, args.min_bytes, mark_step))
    print()
    print(peers.busy_note(records))
    untracked = [r for r in rows if r["untracked_large"]]
    if untracked:
        print("Warning: calltime's table of large blocks was full in %d row(s): some frees were not timed."
              % len(untracked))
    if args.csv:
        peers.write_csv(args.csv, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": sys.argv, "runs": records, "summary": rows}, f, indent=1)
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
