"""Run the bundled training workloads under glibc, jemalloc, tcmalloc, mimalloc and optmem (LD_PRELOAD), interleaved, and print a table of medians."""

import argparse
import csv
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOAD_DIR = REPO / "tests" / "workloads"
# Debian's torch/numpy live in the system interpreter, not in a pyenv one on PATH.
PYTHON = "/usr/bin/python3"
RESULT_PREFIX = "OPTMEM_RESULT "
WORKLOADS = ("mlp_sgd", "cnn_bn_adam", "transformer_adamw", "numpy_mlp")
BASELINE = "glibc"

# The one table of allocators. "preload" is a file name looked up in the system
# library directories, or None for the process's own glibc malloc; "optmem" gets its
# path from --optmem-lib and its environment from --optmem-env. "report": the harness
# points OPTMEM_REPORT at a temp file and reads the lower bound from it.
ALLOCATORS = {
    "glibc": {"preload": None, "env": {}},
    "jemalloc": {"preload": "libjemalloc.so.2", "env": {}},
    "tcmalloc": {"preload": "libtcmalloc_minimal.so.4", "env": {}},
    "mimalloc": {"preload": "libmimalloc.so.2", "env": {}},
    "optmem": {"preload": None, "env": {}, "report": True},
}

# Where the lower bound sits in an optmem report. Looked for at the top level first,
# then anywhere nested (e.g. per domain), taking the largest; adapt here if the
# report schema names it differently.
LOWER_BOUND_KEYS = ("lower_bound_bytes",)

MIB = 1 << 20
# Other processes using more than this many cores during a run make its timing
# suspect (the workloads' OpenMP threads degrade badly when oversubscribed).
BUSY_CORES = 0.25


def log(msg):
    """Progress goes to stderr so stdout carries only the table."""
    print(msg, file=sys.stderr, flush=True)


def lower_bound_of(report):
    """Return the lower bound in bytes found in an optmem report (dict/list), or None."""
    if isinstance(report, dict):
        for key in LOWER_BOUND_KEYS:
            value = report.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value
        children = report.values()
    elif isinstance(report, list):
        children = report
    else:
        return None
    found = [v for v in map(lower_bound_of, children) if v is not None]
    return max(found) if found else None


def library_dirs():
    """System library directories, the multiarch one first."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    return ["/usr/lib/" + multiarch, "/lib/" + multiarch, "/usr/lib", "/usr/local/lib"]


def resolve_preload(name, spec, optmem_lib):
    """Absolute path to preload for an allocator, None for glibc; raise if missing."""
    if name == "optmem":
        path = Path(optmem_lib)
        if not path.is_absolute():
            path = REPO / path
        if not path.is_file():
            raise FileNotFoundError("optmem library %s does not exist (not built yet?)" % path)
        return str(path)
    if spec["preload"] is None:
        return None
    for d in library_dirs():
        candidate = Path(d) / spec["preload"]
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError("%s not found in %s" % (spec["preload"], ", ".join(library_dirs())))


def system_busy_s():
    """CPU seconds the whole machine has spent busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    """CPU seconds used by our finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def parse_env_pairs(pairs):
    """Turn ['KEY=VAL', ...] into a dict."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit("--optmem-env wants KEY=VAL, got %r" % pair)
        env[key] = value
    return env


def base_env():
    """The parent environment minus anything that would change which allocator runs."""
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("OPTMEM_")}


def parse_result(stdout):
    """The JSON from the workload's last OPTMEM_RESULT line, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None


def run_once(workload, alloc, args, report_path):
    """Run one workload under one allocator; return a record of what it measured."""
    env = base_env()
    if alloc["path"]:
        env["LD_PRELOAD"] = alloc["path"]
    env.update(alloc["env"])
    if report_path:
        env["OPTMEM_REPORT"] = str(report_path)
    cmd = [PYTHON, str(WORKLOAD_DIR / (workload + ".py")), "--threads", str(args.threads), "--json"]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    rec = {"workload": workload, "allocator": alloc["name"], "error": None,
           "result": None, "lower_bound_bytes": None}
    t0, busy0, ours0 = time.perf_counter(), system_busy_s(), children_cpu_s()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        rec["error"] = "timed out after %ss" % args.timeout
        return rec
    finally:
        rec["wall_s"] = time.perf_counter() - t0
        # What the rest of the machine used meanwhile, in cores: a noisy neighbour
        # is the usual reason for an outlier in steps/s.
        others = (system_busy_s() - busy0) - (children_cpu_s() - ours0)
        rec["other_cpu_cores"] = max(0.0, others / rec["wall_s"]) if rec["wall_s"] > 0 else 0.0
    rec["result"] = parse_result(proc.stdout) if proc.returncode == 0 else None
    if rec["result"] is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        rec["error"] = "exit %d: %s" % (proc.returncode, " | ".join(tail))
    if report_path and report_path.is_file():
        try:
            rec["lower_bound_bytes"] = lower_bound_of(json.loads(report_path.read_text()))
        except (OSError, ValueError) as e:
            log("  could not read optmem report %s: %s" % (report_path, e))
    return rec


def run_all(workloads, allocs, args, tmpdir):
    """Interleave: run r of every (workload, allocator) before run r+1 of any."""
    records = []
    total = args.runs * len(workloads) * len(allocs)
    n = 0
    for r in range(args.runs):
        for w in workloads:
            for a in allocs:
                n += 1
                report = Path(tmpdir) / ("%s-%s-%d.json" % (w, a["name"], r)) if a.get("report") else None
                rec = run_once(w, a, args, report)
                rec["run"] = r
                records.append(rec)
                log(progress_line(n, total, r, args.runs, rec))
    return records


def progress_line(n, total, r, runs, rec):
    """One stderr line per finished run."""
    head = "[%*d/%d] run %d/%d %-18s %-9s %6.1fs  others %.2f cores" % (
        len(str(total)), n, total, r + 1, runs, rec["workload"], rec["allocator"], rec["wall_s"],
        rec["other_cpu_cores"])
    if rec["error"]:
        return head + "  FAILED: " + rec["error"]
    res = rec["result"]
    sps = res["steady_steps_per_s"]
    return head + "  training peak %7.1f MiB  %s steps/s" % (
        res["training_peak_bytes"] / MIB, "%.2f" % sps if sps else "-")


def median_of(values):
    """Median of the values that are not None, or None."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def loss_check(runs, reference):
    """Compare every run's losses with the reference list, bit for bit."""
    if reference is None:
        return "no reference"
    if not runs:
        return "no runs"
    for rec in runs:
        losses = rec["result"]["losses"]
        if losses != reference:
            for i, (a, b) in enumerate(zip(losses, reference)):
                if a != b:
                    return "DIFFERS (run %d, step %d)" % (rec["run"] + 1, i)
            return "DIFFERS (run %d, length)" % (rec["run"] + 1)
    return "identical"


def summarize(records, workloads, allocs):
    """Median rows per (workload, allocator) with ratios to the baseline and lower bound."""
    names = [a["name"] for a in allocs]
    ref_name = BASELINE if BASELINE in names else names[0]
    rows = []
    for w in workloads:
        ok = {n: [r for r in records if r["workload"] == w and r["allocator"] == n and not r["error"]]
              for n in names}
        ref_runs = sorted(ok[ref_name], key=lambda r: r["run"])
        reference = ref_runs[0]["result"]["losses"] if ref_runs else None
        lower = median_of(r["lower_bound_bytes"] for rs in ok.values() for r in rs)
        medians = {}
        for n in names:
            res = [r["result"] for r in ok[n]]
            medians[n] = {k: median_of(x[k] for x in res) for k in (
                "rss_after_imports_bytes", "peak_rss_bytes", "training_peak_bytes",
                "steady_steps_per_s", "minflt_per_steady_step")}
        base = medians[ref_name]
        for n in names:
            m = medians[n]
            mine = [r for r in records if r["workload"] == w and r["allocator"] == n]
            failed = sum(1 for r in mine if r["error"])
            rows.append(dict(
                workload=w, allocator=n, runs_ok=len(ok[n]), runs_failed=failed, **m,
                training_peak_ratio=ratio(m["training_peak_bytes"], base["training_peak_bytes"]),
                steps_per_s_ratio=ratio(m["steady_steps_per_s"], base["steady_steps_per_s"]),
                lower_bound_bytes=lower,
                training_peak_over_lower_bound=ratio(m["training_peak_bytes"], lower),
                losses_vs_reference=loss_check(ok[n], reference),
                max_other_cpu_cores=max(r["other_cpu_cores"] for r in mine),
                reference=ref_name))
    return rows


def ratio(a, b):
    """a / b, or None when either is missing."""
    return a / b if a is not None and b else None


def fmt(value, spec, scale=1):
    """Format a possibly missing number."""
    return "–" if value is None else format(value / scale, spec)


def markdown_table(rows):
    """The summary as a markdown table."""
    ref = rows[0]["reference"] if rows else BASELINE
    show_lb = any(r["lower_bound_bytes"] is not None for r in rows)
    head = ["workload", "allocator", "RSS after imports (MiB)", "peak RSS (MiB)",
            "training peak (MiB)", "steady steps/s", "minflt/steady step",
            "training peak vs %s" % ref, "steps/s vs %s" % ref]
    if show_lb:
        head.append("training peak / lower bound")
    head += ["losses vs %s" % ref, "others' CPU, max (cores)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workload"], r["allocator"] + ("" if not r["runs_failed"] else
                                                  " (%d failed)" % r["runs_failed"]),
                 fmt(r["rss_after_imports_bytes"], ".1f", MIB),
                 fmt(r["peak_rss_bytes"], ".1f", MIB),
                 fmt(r["training_peak_bytes"], ".1f", MIB),
                 fmt(r["steady_steps_per_s"], ".2f"),
                 fmt(r["minflt_per_steady_step"], ".0f"),
                 fmt(r["training_peak_ratio"], ".2f"),
                 fmt(r["steps_per_s_ratio"], ".2f")]
        if show_lb:
            cells.append(fmt(r["training_peak_over_lower_bound"], ".2f"))
        cells += [r["losses_vs_reference"], fmt(r["max_other_cpu_cores"], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path, rows):
    """One CSV row per (workload, allocator) summary."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


def select_allocators(args):
    """The requested allocators that can run, each with its resolved preload path."""
    optmem_env = parse_env_pairs(args.optmem_env)
    allocs = []
    for name in args.allocators.split(","):
        if name not in ALLOCATORS:
            raise SystemExit("unknown allocator %r (known: %s)" % (name, ", ".join(ALLOCATORS)))
        spec = ALLOCATORS[name]
        try:
            path = resolve_preload(name, spec, args.optmem_lib)
        except FileNotFoundError as e:
            log("skipping %s: %s" % (name, e))
            continue
        env = dict(spec["env"], **(optmem_env if name == "optmem" else {}))
        allocs.append({"name": name, "path": path, "env": env, "report": spec.get("report", False)})
    if not allocs:
        raise SystemExit("no allocator left to run")
    return allocs


def select_workloads(arg):
    """The requested workloads, checked against the scripts present."""
    names = arg.split(",")
    for n in names:
        if not (WORKLOAD_DIR / (n + ".py")).is_file():
            raise SystemExit("no workload %s in %s" % (n, WORKLOAD_DIR))
    return names


def parse_args():
    """Command line of the harness."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated scripts from tests/workloads (default %(default)s)")
    p.add_argument("--allocators", default=",".join(ALLOCATORS),
                   help="comma-separated names from the table (default %(default)s)")
    p.add_argument("--runs", type=int, default=3, help="interleaved runs of each (default 3)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: the workload's)")
    p.add_argument("--threads", type=int, default=2, help="threads per workload (default 2)")
    p.add_argument("--optmem-lib", default="build/preload/liboptmem.so",
                   help="optmem library, relative to the repo unless absolute (default %(default)s)")
    p.add_argument("--optmem-env", action="append", default=[], metavar="KEY=VAL",
                   help="extra environment for optmem runs, e.g. OPTMEM_MODE=trace (repeatable)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per run before giving up")
    p.add_argument("--csv", help="write the summary rows here")
    p.add_argument("--json", help="write every run and the summary here")
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def main():
    # Turn SIGTERM into SystemExit so subprocess.run kills the running workload too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    workloads = select_workloads(args.workloads)
    allocs = select_allocators(args)
    log("running %d workload(s) x %d allocator(s) x %d run(s), interleaved"
        % (len(workloads), len(allocs), args.runs))
    with tempfile.TemporaryDirectory(prefix="optmem-peers-") as tmpdir:
        records = run_all(workloads, allocs, args, tmpdir)
    rows = summarize(records, workloads, allocs)
    print("Medians of %d interleaved run(s); steps=%s, threads=%d.\n"
          % (args.runs, args.steps or "workload default", args.threads))
    print(markdown_table(rows))
    busy = [r for r in records if r["other_cpu_cores"] > BUSY_CORES]
    if busy:
        print("\nWarning: during %d of %d runs other processes used more than %.2f cores "
              "(at most %.2f); steps/s are not trustworthy." % (
                  len(busy), len(records), BUSY_CORES, max(r["other_cpu_cores"] for r in busy)))
    else:
        print("\nOther processes used at most %.2f cores during any run."
              % max(r["other_cpu_cores"] for r in records))
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        meta = {"command": sys.argv, "runs": args.runs, "steps": args.steps,
                "threads": args.threads, "allocators": allocs, "workloads": workloads}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "runs": records, "summary": rows}, f, indent=1)
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
