"""Checks OPTMEM_PLAN_DUMP: every planning instance the pool hands to the replanner is written
as a lifetime CSV that `optmem plan` reads, and planned offline it has the lower bound (and,
for these small instances, the peak) of the plan made in the program.

Cases, each a run of train_drift under LD_PRELOAD:
- steady, searched inline (OPTMEM_PLAN_THREAD=0): one file, whose lower bound and peak are the
  report's plan figures;
- evaluate (training and evaluation phases, several plans, kept plans serving again): one
  file per plan made, the report's plan (the one serving at exit) among them;
- steady, searched on the optmem-plan thread (OPTMEM_PLAN_THREAD=1): the file says so, and
  agrees with the report;
- steady with OPTMEM_PLAN_FILE: the saved plan's searches (its circle, the line's parts) are
  written too, the circle with the iteration's lower bound, each file planned without error;
- a directory that cannot be written: the program's output is the plain run's, one warning
  line, the plan made as without the variable.

Usage: plan_dump.py --preload LIBOPTMEM --optmem OPTMEM_CLI --program TRAIN_DRIFT.
Exit status 0 on success."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from run_serving import plain_env, run, run_under_optmem


def offline(optmem, path):
    """`optmem plan FILE`: its lower bound and peak, or an error string."""
    res = subprocess.run([optmem, "plan", path, "--budget-ms", "2000"], capture_output=True,
                         text=True)
    if res.returncode != 0:
        return f"optmem plan {path} failed ({res.returncode}): {res.stderr.strip()}"
    got = {}
    for key in ("lower bound", "peak"):
        m = re.search(r"^%s:\s+(\d+)" % key, res.stdout, re.M)
        if not m:
            return f"optmem plan {path}: no '{key}' line in:\n{res.stdout}"
        got[key] = int(m.group(1))
    return got


def dumped(tmp):
    """The dumped files, by their count N (plan-PID-DOMAIN-N.csv), and their comment lines."""
    out = {}
    for path in glob.glob(os.path.join(tmp, "plan-*-*-*.csv")):
        n = int(re.search(r"-(\d+)\.csv$", path).group(1))
        with open(path) as f:
            out[n] = (path, f.readline())
    return [out[n] for n in sorted(out)]


def case(args, name, drift, steps, env_extra, check):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.program, drift, str(steps)]
        rc, plain_out, _ = run(cmd, plain_env())
        if rc != 0:
            return [f"{name}: the plain run failed ({rc})"]
        dump_dir = os.path.join(tmp, "dump")
        os.mkdir(dump_dir)
        env = dict(plain_env(), LD_PRELOAD=args.preload, OPTMEM_REPORT=f"{tmp}/report.json",
                   OPTMEM_PLAN_DUMP=dump_dir, OPTMEM_LOG="warn")
        env.update({k: v.replace("{tmp}", tmp) for k, v in env_extra.items()})
        err, failures = run_under_optmem(cmd, env, plain_out)
        if not failures:
            with open(f"{tmp}/report.json") as f:
                serving = json.load(f)["serving"]
            failures = check(dumped(dump_dir), serving, err, tmp)
    return [f"{name}: {f}" for f in failures]


def agree(optmem, files, serving, want_comment):
    """Every file planned offline; the report's plan is one of them, to the byte."""
    failures, found = [], False
    if not files:
        return ["no planning instance was written"]
    for path, comment in files:
        got = offline(optmem, path)
        if isinstance(got, str):
            failures.append(got)
            continue
        if want_comment not in comment:
            failures.append(f"{path}: comment {comment.strip()!r} lacks {want_comment!r}")
        print(f"  {os.path.basename(path)}: lower bound {got['lower bound']}, peak {got['peak']}")
        if got["lower bound"] == serving["plan_lower_bound_bytes"]:
            found = True
            if got["peak"] > serving["plan_peak_bytes"]:
                failures.append(f"{path}: offline peak {got['peak']} above the program's "
                                f"{serving['plan_peak_bytes']}")
    if not found:
        failures.append(f"no file has the report's lower bound {serving['plan_lower_bound_bytes']}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--optmem", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    failures = []

    def steady_inline(files, serving, err, tmp):
        out = agree(args.optmem, files, serving, "searched inline")
        if len(files) != 1 or serving["plans"] != 1:
            out.append(f"{len(files)} files for {serving['plans']} plans, expected 1 and 1")
        got = offline(args.optmem, files[0][0]) if files else None
        if isinstance(got, dict) and (got["lower bound"], got["peak"]) != (
                serving["plan_lower_bound_bytes"], serving["plan_peak_bytes"]):
            out.append(f"offline {got}, report's {serving}")
        return out

    def evaluate(files, serving, err, tmp):
        out = agree(args.optmem, files, serving, "searched inline")
        if len(files) != serving["plans"] or serving["plans"] < 2:
            out.append(f"{len(files)} files for {serving['plans']} plans")
        if serving["reused_plans"] < 1:
            out.append("no kept plan served again: the scenario did not come back to a phase")
        return out

    def on_thread(files, serving, err, tmp):
        return agree(args.optmem, files, serving, "on the optmem-plan thread")

    def saved(files, serving, err, tmp):
        out = agree(args.optmem, files, serving, "")
        circles = [p for p, c in files if "saved plan's circle" in c]
        if not os.path.exists(f"{tmp}/plan.bin"):
            out.append("no plan file was written")
        if len(circles) != 1:
            out.append(f"{len(circles)} files of a saved plan's circle, expected 1")
        else:
            got = offline(args.optmem, circles[0])
            if isinstance(got, dict) and got["lower bound"] != serving["plan_lower_bound_bytes"]:
                out.append(f"the circle's lower bound {got['lower bound']}, the iteration's "
                           f"{serving['plan_lower_bound_bytes']}")
        return out

    failures += case(args, "steady", "steady", 50, {"OPTMEM_PLAN_THREAD": "0"}, steady_inline)
    failures += case(args, "evaluate", "evaluate", 120, {"OPTMEM_PLAN_THREAD": "0"}, evaluate)
    failures += case(args, "thread", "steady", 60, {"OPTMEM_PLAN_THREAD": "1"}, on_thread)
    failures += case(args, "saved", "steady", 50,
                     {"OPTMEM_PLAN_THREAD": "0", "OPTMEM_PLAN_FILE": "{tmp}/plan.bin"}, saved)

    # A directory that cannot be written: one warning, the plan made all the same.
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.program, "steady", "50"]
        _, plain_out, _ = run(cmd, plain_env())
        env = dict(plain_env(), LD_PRELOAD=args.preload, OPTMEM_REPORT=f"{tmp}/report.json",
                   OPTMEM_PLAN_DUMP=f"{tmp}/missing/dir", OPTMEM_PLAN_THREAD="0")
        err, more = run_under_optmem(cmd, env, plain_out)
        failures += [f"unwritable: {f}" for f in more]
        lines = [line for line in err.splitlines() if "OPTMEM_PLAN_DUMP" in line]
        if len(lines) != 1 or len(err.splitlines()) != 1:
            failures.append(f"unwritable: expected one warning line, stderr was:\n{err}")
        if not more:
            with open(f"{tmp}/report.json") as f:
                if json.load(f)["serving"]["plans"] < 1:
                    failures.append("unwritable: no plan was made")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print("plan_dump: %s" % ("ok" if not failures else f"{len(failures)} failures"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
