"""Run the bundled training workloads under glibc, jemalloc, tcmalloc, mimalloc and optmem (plan, trace, saved plan) through LD_PRELOAD, interleaved, and print a table of medians."""

import argparse
import csv
import json
import os
import resource
import shutil
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
# GNU time measures a C program's peak RSS (%M, KiB) and minor faults (%R): the program
# prints no OPTMEM_RESULT line. Debian package "time".
GNU_TIME = "/usr/bin/time"
RESULT_PREFIX = "OPTMEM_RESULT "
BASELINE = "glibc"

# The one table of workloads. "python": a script of tests/workloads run with --json,
# "steps" the harness's default for it (None: the script's own), overridden by --steps.
# "program": a C program from the build directory, measured from outside; its "output"
# (the last stdout line, a checksum) stands in for the losses. The torch workloads run
# 20 steps here instead of their own 30/40/30 so that the default run (3 torch
# workloads x 7 allocators x 3 runs) stays under ~15 minutes on 2 cores.
WORKLOADS = {
    "mlp_sgd": {"kind": "python", "script": "mlp_sgd.py", "args": [], "steps": 20},
    "cnn_bn_adam": {"kind": "python", "script": "cnn_bn_adam.py", "args": [], "steps": 20},
    "transformer_adamw": {"kind": "python", "script": "transformer_adamw.py", "args": [], "steps": 20},
    "numpy_mlp": {"kind": "python", "script": "numpy_mlp.py", "args": [], "steps": 20},
    # A program nobody here wrote: scikit-learn's forest and MLP (python3-sklearn).
    "sklearn_fit": {"kind": "python", "script": "sklearn_fit.py", "args": [], "steps": 30},
    # The CNN with evaluation phases: 10 training steps, then 6 evaluation steps, six times.
    "cnn_train_eval": {"kind": "python", "script": "cnn_bn_adam.py",
                       "args": ["--eval-every", "10", "--eval-steps", "6"], "steps": 96},
    "train_drift": {"kind": "program", "program": "tests/train_drift", "args": ["steady", "2000"],
                    "iterations": 2000},
}
DEFAULT_WORKLOADS = ("mlp_sgd", "cnn_bn_adam", "transformer_adamw")

# The one table of allocators. "preload" is a file name looked up in the system
# library directories, or None for the process's own glibc malloc. "optmem": preloads
# --optmem-lib with "env" plus --optmem-env; the harness points OPTMEM_REPORT at a temp
# file and reads the lower bound and the serving counters from it. "saved_plan": before
# the measured runs of a workload, one unmeasured run writes OPTMEM_PLAN_FILE, and each
# measured run loads a fresh copy of it (a copy, so that no measured run can see a plan
# file that an earlier measured run rewrote).
ALLOCATORS = {
    "glibc": {"preload": None, "env": {}},
    "jemalloc": {"preload": "libjemalloc.so.2", "env": {}},
    "tcmalloc": {"preload": "libtcmalloc_minimal.so.4", "env": {}},
    "mimalloc": {"preload": "libmimalloc.so.2", "env": {}},
    "optmem": {"optmem": True, "env": {"OPTMEM_MODE": "plan"}},
    "optmem-trace": {"optmem": True, "env": {"OPTMEM_MODE": "trace"}},
    "optmem-saved": {"optmem": True, "env": {"OPTMEM_MODE": "plan"}, "saved_plan": True},
    "optmem-hugepages": {"optmem": True, "env": {"OPTMEM_MODE": "plan", "OPTMEM_HUGEPAGES": "1"}},
}
PEERS = ("jemalloc", "tcmalloc", "mimalloc")

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
    if spec.get("optmem"):
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


def serving_of(report):
    """(served share or None, saved_plan flag or None) from an optmem report's serving object."""
    serving = report.get("serving") if isinstance(report, dict) else None
    if not isinstance(serving, dict):
        return None, None
    requests = serving.get("serving_requests")
    served = serving.get("served_from_plan")
    share = served / requests if isinstance(served, int) and isinstance(requests, int) and requests else None
    return share, serving.get("saved_plan")


def iteration_share_of(report):
    """Served share within the served iterations (serving.iteration_served /
    serving.iteration_requests), leaving out what the program requests after its loop; None
    where the report has no such counters or no iteration was served."""
    serving = report.get("serving") if isinstance(report, dict) else None
    if not isinstance(serving, dict):
        return None
    requests, served = serving.get("iteration_requests"), serving.get("iteration_served")
    return served / requests if isinstance(served, int) and isinstance(requests, int) and requests else None


def command_for(workload, alloc_env, preload, args, time_file):
    """(argv, environment) that run one workload under one allocator."""
    env = base_env()
    if workload["kind"] == "python":
        if preload:
            env["LD_PRELOAD"] = preload
        env.update(alloc_env)
        cmd = [PYTHON, str(WORKLOAD_DIR / workload["script"]), "--threads", str(args.threads), "--json"]
        steps = args.steps or workload.get("steps")
        if steps:
            cmd += ["--steps", str(steps)]
        if args.batch_scale != 1:
            cmd += ["--batch-scale", str(args.batch_scale)]
        return cmd + list(workload["args"]), env
    # A C program: GNU time runs without the preload (else it would be measured, and
    # under optmem write the report too) and env(1) puts the allocator in front of
    # the program only.
    program = Path(args.build_dir) / workload["program"]
    if not program.is_absolute():
        program = REPO / program
    inner = ["LD_PRELOAD=" + preload] if preload else []
    inner += ["%s=%s" % kv for kv in alloc_env.items()]
    cmd = [GNU_TIME, "-f", "%M %R", "-o", str(time_file), "/usr/bin/env"] + inner
    return cmd + [str(program)] + list(workload["args"]), env


def program_result(workload, stdout, time_file, wall_s):
    """What a C program run measured, in the keys of the workloads' OPTMEM_RESULT.

    The program has no imports phase, so its training peak is its whole peak RSS; its
    per-step numbers are over the whole run (start-up included, a few milliseconds).
    """
    fields = Path(time_file).read_text().split()
    max_rss_kib, minflt = int(fields[-2]), int(fields[-1])
    iterations = workload["iterations"]
    lines = stdout.strip().splitlines()
    return {
        "workload": workload["name"], "steps": iterations, "threads": 1,
        "rss_after_imports_bytes": None, "peak_rss_bytes": max_rss_kib * 1024,
        "training_peak_bytes": max_rss_kib * 1024, "rss_end_bytes": None,
        "steady_steps_per_s": iterations / wall_s if wall_s > 0 else None,
        "minflt_per_steady_step": minflt / iterations,
        "metric": "output", "losses": lines[-1:],
    }


def run_once(workload, alloc, args, tmpdir, tag, plan_file=None):
    """Run one workload under one allocator; return a record of what it measured."""
    alloc_env = dict(alloc["env"])
    report_path = Path(tmpdir) / ("%s.report.json" % tag) if alloc.get("optmem") else None
    if report_path:
        alloc_env["OPTMEM_REPORT"] = str(report_path)
    if plan_file:
        alloc_env["OPTMEM_PLAN_FILE"] = str(plan_file)
    time_file = Path(tmpdir) / ("%s.time" % tag)
    cmd, env = command_for(workload, alloc_env, alloc["path"], args, time_file)
    rec = {"workload": workload["name"], "allocator": alloc["name"], "error": None,
           "result": None, "lower_bound_bytes": None, "served_share": None, "iteration_served_share": None,
           "saved_plan": None}
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
    if proc.returncode == 0:
        if workload["kind"] == "python":
            rec["result"] = parse_result(proc.stdout)
        else:
            rec["result"] = program_result(workload, proc.stdout, time_file, rec["wall_s"])
    if rec["result"] is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        rec["error"] = "exit %d: %s" % (proc.returncode, " | ".join(tail))
    if report_path and report_path.is_file():
        try:
            report = json.loads(report_path.read_text())
            rec["lower_bound_bytes"] = lower_bound_of(report)
            rec["served_share"], rec["saved_plan"] = serving_of(report)
            rec["iteration_served_share"] = iteration_share_of(report)
        except (OSError, ValueError) as e:
            log("  could not read optmem report %s: %s" % (report_path, e))
        # Reports hold samples and timelines; dropping them keeps the temp dir small.
        report_path.unlink()
    return rec


def file_safe(name):
    """A workload name usable in a file name (optnet_table.py's are model/mode)."""
    return name.replace("/", "_")


def prepare_saved_plans(workloads, allocs, args, tmpdir):
    """One unmeasured run per workload that writes its plan file; return {workload: path}."""
    plans = {}
    for alloc in allocs:
        if not alloc.get("saved_plan"):
            continue
        for w in workloads:
            path = Path(tmpdir) / ("%s.%s.plan" % (file_safe(w["name"]), alloc["name"]))
            rec = run_once(w, alloc, args, tmpdir, "%s-%s-prep" % (file_safe(w["name"]), alloc["name"]),
                           path)
            if rec["error"]:
                log("  saved-plan run of %s failed: %s" % (w["name"], rec["error"]))
            elif not path.is_file():
                log("  saved-plan run of %s wrote no plan file %s" % (w["name"], path))
            else:
                log("  %s: plan file written (%d bytes) in %.1fs, unmeasured"
                    % (w["name"], path.stat().st_size, rec["wall_s"]))
            plans[(w["name"], alloc["name"])] = path
    return plans


def plan_for_run(plans, workload, alloc, tmpdir, tag):
    """The plan file one measured run loads: a fresh copy of its saved plan (None where the
    allocator serves none), so that no run sees a plan file an earlier one rewrote."""
    saved = plans.get((workload["name"], alloc["name"]))
    if saved is None:
        return None
    plan = Path(tmpdir) / (tag + ".plan")
    if saved.is_file():
        shutil.copyfile(saved, plan)
    return plan


def run_all(workloads, allocs, args, tmpdir):
    """Interleave: run r of every (workload, allocator) before run r+1 of any."""
    plans = prepare_saved_plans(workloads, allocs, args, tmpdir)
    records = []
    total = args.runs * len(workloads) * len(allocs)
    n = 0
    for r in range(args.runs):
        for w in workloads:
            for a in allocs:
                n += 1
                tag = "%s-%s-%d" % (file_safe(w["name"]), a["name"], r)
                rec = run_once(w, a, args, tmpdir, tag, plan_for_run(plans, w, a, tmpdir, tag))
                rec["run"] = r
                records.append(rec)
                log(progress_line(n, total, r, args.runs, rec))
    return records


def progress_line(n, total, r, runs, rec):
    """One stderr line per finished run."""
    head = "[%*d/%d] run %d/%d %-18s %-12s %6.1fs  others %.2f cores" % (
        len(str(total)), n, total, r + 1, runs, rec["workload"], rec["allocator"], rec["wall_s"],
        rec["other_cpu_cores"])
    if rec["error"]:
        return head + "  FAILED: " + rec["error"]
    res = rec["result"]
    sps = res["steady_steps_per_s"]
    line = head + "  training peak %7.1f MiB  %s steps/s" % (
        res["training_peak_bytes"] / MIB, "%.2f" % sps if sps else "-")
    if rec["served_share"] is not None:
        line += "  served %.3f" % rec["served_share"]
    if rec["saved_plan"] is not None:
        line += "  saved_plan %d" % rec["saved_plan"]
    return line


def median_of(values):
    """Median of the values that are not None, or None."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def output_check(runs, reference):
    """Compare every run's per-step values (losses, checksums) with the reference, bit for bit."""
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


MEDIAN_KEYS = ("rss_after_imports_bytes", "peak_rss_bytes", "training_peak_bytes", "rss_end_bytes",
               "steady_steps_per_s", "minflt_per_steady_step")


def summarize(records, workloads, allocs):
    """Median rows per (workload, allocator) with ratios to the baseline and lower bound."""
    names = [a["name"] for a in allocs]
    ref_name = BASELINE if BASELINE in names else names[0]
    rows = []
    for w in workloads:
        w = w["name"]
        ok = {n: [r for r in records if r["workload"] == w and r["allocator"] == n and not r["error"]]
              for n in names}
        ref_runs = sorted(ok[ref_name], key=lambda r: r["run"])
        reference = ref_runs[0]["result"]["losses"] if ref_runs else None
        lower = median_of(r["lower_bound_bytes"] for rs in ok.values() for r in rs)
        medians = {n: {k: median_of(r["result"].get(k) for r in ok[n]) for k in MEDIAN_KEYS}
                   for n in names}
        base = medians[ref_name]
        for n in names:
            m = medians[n]
            mine = [r for r in records if r["workload"] == w and r["allocator"] == n]
            failed = sum(1 for r in mine if r["error"])
            saved = [r["saved_plan"] for r in ok[n] if r["saved_plan"] is not None]
            spec = next(a for a in allocs if a["name"] == n)
            rows.append(dict(
                workload=w, allocator=n, runs_ok=len(ok[n]), runs_failed=failed, **m,
                training_peak_ratio=ratio(m["training_peak_bytes"], base["training_peak_bytes"]),
                rss_end_ratio=ratio(m["rss_end_bytes"], base["rss_end_bytes"]),
                steps_per_s_ratio=ratio(m["steady_steps_per_s"], base["steady_steps_per_s"]),
                lower_bound_bytes=lower,
                training_peak_over_lower_bound=ratio(m["training_peak_bytes"], lower),
                served_share=median_of(r["served_share"] for r in ok[n]),
                iteration_served_share=median_of(r["iteration_served_share"] for r in ok[n]),
                # Runs whose saved plan was not served (report's serving.saved_plan != 1).
                saved_plan_not_served=(sum(1 for r in ok[n] if r["saved_plan"] != 1)
                                       if spec.get("saved_plan") else None),
                saved_plan_runs=len(saved),
                output_vs_reference=output_check(ok[n], reference),
                max_other_cpu_cores=max((r["other_cpu_cores"] for r in mine), default=None),
                reference=ref_name))
    return rows


def ratio(a, b):
    """a / b, or None when either is missing."""
    return a / b if a is not None and b else None


def fmt(value, spec, scale=1):
    """Format a possibly missing number."""
    return "–" if value is None else format(value / scale, spec)


def allocator_cell(r):
    """The allocator's name with failures and unserved saved plans noted."""
    notes = []
    if r["runs_failed"]:
        notes.append("%d failed" % r["runs_failed"])
    if r["saved_plan_not_served"]:
        notes.append("saved plan NOT served in %d of %d" % (r["saved_plan_not_served"], r["runs_ok"]))
    return r["allocator"] + (" (%s)" % "; ".join(notes) if notes else "")


def markdown_table(rows):
    """The summary as a markdown table."""
    ref = rows[0]["reference"] if rows else BASELINE
    show_lb = any(r["lower_bound_bytes"] is not None for r in rows)
    show_served = any(r["served_share"] is not None for r in rows)
    head = ["workload", "allocator", "RSS after imports (MiB)", "peak RSS (MiB)",
            "training peak (MiB)", "RSS at end (MiB)", "steady steps/s", "minflt/steady step",
            "training peak vs %s" % ref, "RSS at end vs %s" % ref, "steps/s vs %s" % ref]
    if show_lb:
        head.append("training peak / lower bound")
    if show_served:
        head += ["served from plan", "served in iterations"]
    head += ["output vs %s" % ref, "others' CPU, max (cores)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workload"], allocator_cell(r),
                 fmt(r["rss_after_imports_bytes"], ".1f", MIB),
                 fmt(r["peak_rss_bytes"], ".1f", MIB),
                 fmt(r["training_peak_bytes"], ".1f", MIB),
                 fmt(r["rss_end_bytes"], ".1f", MIB),
                 fmt(r["steady_steps_per_s"], ".2f"),
                 fmt(r["minflt_per_steady_step"], ".0f"),
                 fmt(r["training_peak_ratio"], ".2f"),
                 fmt(r["rss_end_ratio"], ".2f"),
                 fmt(r["steps_per_s_ratio"], ".2f")]
        if show_lb:
            cells.append(fmt(r["training_peak_over_lower_bound"], ".2f"))
        if show_served:
            cells += [fmt(r["served_share"], ".3f"), fmt(r["iteration_served_share"], ".3f")]
        cells += [r["output_vs_reference"], fmt(r["max_other_cpu_cores"], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path, rows):
    """One CSV row per (workload, allocator) summary."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


def select_allocators(names, args):
    """The requested allocators that can run, each with its resolved preload path."""
    optmem_env = parse_env_pairs(args.optmem_env)
    optmem_lib = args.optmem_lib or str(Path(args.build_dir) / "preload" / "liboptmem.so")
    allocs = []
    for name in names:
        if name not in ALLOCATORS:
            raise SystemExit("unknown allocator %r (known: %s)" % (name, ", ".join(ALLOCATORS)))
        spec = ALLOCATORS[name]
        try:
            path = resolve_preload(name, spec, optmem_lib)
        except FileNotFoundError as e:
            log("skipping %s: %s" % (name, e))
            continue
        env = dict(spec["env"], **(optmem_env if spec.get("optmem") else {}))
        allocs.append({"name": name, "path": path, "env": env, "optmem": spec.get("optmem", False),
                       "saved_plan": spec.get("saved_plan", False)})
    if not allocs:
        raise SystemExit("no allocator left to run")
    return allocs


def select_workloads(arg, build_dir):
    """The requested workloads from the table, checked against the files present."""
    chosen = []
    for n in arg.split(","):
        if n not in WORKLOADS:
            raise SystemExit("unknown workload %r (known: %s)" % (n, ", ".join(WORKLOADS)))
        spec = dict(WORKLOADS[n], name=n)
        if spec["kind"] == "python":
            if not (WORKLOAD_DIR / spec["script"]).is_file():
                raise SystemExit("no workload %s in %s" % (spec["script"], WORKLOAD_DIR))
        else:
            program = Path(build_dir) / spec["program"]
            program = program if program.is_absolute() else REPO / program
            if not program.is_file():
                raise SystemExit("%s does not exist (build the tests first)" % program)
            if not Path(GNU_TIME).is_file():
                raise SystemExit("%s is needed to measure %s (apt-get install time)" % (GNU_TIME, n))
        chosen.append(spec)
    return chosen


def add_common_args(p, runs=3):
    """Options shared with the other drivers in bench/ (optnet_table.py)."""
    p.add_argument("--allocators", default=",".join(ALLOCATORS),
                   help="comma-separated names from the table (default %(default)s)")
    p.add_argument("--runs", type=int, default=runs, help="interleaved runs of each (default %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="threads per workload (default 2)")
    p.add_argument("--batch-scale", type=int, default=1,
                   help="multiply every Python workload's batch size by this (default %(default)s)")
    p.add_argument("--build-dir", default="build",
                   help="optmem build directory, relative to the repo unless absolute (default %(default)s)")
    p.add_argument("--optmem-lib", default=None,
                   help="optmem library (default BUILD_DIR/preload/liboptmem.so)")
    p.add_argument("--optmem-env", action="append", default=[], metavar="KEY=VAL",
                   help="extra environment for every optmem entry, e.g. OPTMEM_MIN_BYTES=64K (repeatable)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per run before giving up")
    p.add_argument("--csv", help="write the summary rows here")
    p.add_argument("--json", help="write every run and the summary here")


def parse_args():
    """Command line of the harness."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                   help="comma-separated names (known: %s; default %%(default)s)" % ", ".join(WORKLOADS))
    p.add_argument("--steps", type=int, default=None,
                   help="steps per run of every Python workload (default: the table's)")
    add_common_args(p)
    args = p.parse_args()
    if args.runs < 1 or args.batch_scale < 1:
        p.error("--runs and --batch-scale must be at least 1")
    return args


def busy_note(records):
    """One line on how much CPU other processes took while we measured."""
    if not records:
        return ""
    busy = [r for r in records if r["other_cpu_cores"] > BUSY_CORES]
    if busy:
        return ("Warning: during %d of %d runs other processes used more than %.2f cores "
                "(at most %.2f); steps/s are not trustworthy." % (
                    len(busy), len(records), BUSY_CORES, max(r["other_cpu_cores"] for r in busy)))
    return "Other processes used at most %.2f cores during any run." % max(
        r["other_cpu_cores"] for r in records)


def write_json(path, args, allocs, workloads, records, rows):
    """Every run and the summary."""
    meta = {"command": sys.argv, "runs": args.runs, "steps": getattr(args, "steps", None),
            "threads": args.threads, "allocators": allocs, "workloads": workloads}
    with open(path, "w") as f:
        json.dump({"meta": meta, "runs": records, "summary": rows}, f, indent=1)


def main():
    # Turn SIGTERM into SystemExit so subprocess.run kills the running workload too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    workloads = select_workloads(args.workloads, args.build_dir)
    allocs = select_allocators(args.allocators.split(","), args)
    log("running %d workload(s) x %d allocator(s) x %d run(s), interleaved"
        % (len(workloads), len(allocs), args.runs))
    with tempfile.TemporaryDirectory(prefix="optmem-peers-") as tmpdir:
        records = run_all(workloads, allocs, args, tmpdir)
    rows = summarize(records, workloads, allocs)
    steps = ", ".join("%s %s" % (w["name"], w.get("iterations") if w["kind"] == "program"
                                 else (args.steps or w.get("steps") or "default"))
                      for w in workloads)
    scale = "; batch x %d" % args.batch_scale if args.batch_scale != 1 else ""
    print("Medians of %d interleaved run(s); steps: %s; threads=%d%s.\n"
          % (args.runs, steps, args.threads, scale))
    print(markdown_table(rows))
    print("\n" + busy_note(records))
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        write_json(args.json, args, allocs, workloads, records, rows)
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
