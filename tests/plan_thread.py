"""Checks plan mode's search on the optmem-plan thread around fork and exit
(OPTMEM_PLAN_THREAD=1: every search runs there).

fork: train_drift fork_each forks at each of its first iterations and waits for the child,
which trains on alone; one fork comes while the parent's plan is being made. That child
drops the search (its thread stayed with the parent) and must plan on its own; the parent
must install its plan. exit: train_drift steady runs for few iterations, so that some runs
end while their plan is being made: each must exit 0 with a valid report, and a plan file
is either not written or one that a later run loads and serves.

Usage: plan_thread.py --preload LIBOPTMEM --program TRAIN_DRIFT --case fork|exit.
Exit status 0 on success."""
import argparse
import glob
import json
import os
import sys
import tempfile

from run_serving import plain_env, run, run_under_optmem

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tracer"))
from report_schema import SchemaError, validate  # noqa: E402

FORK_DROPPED = "the search under way at fork stays the parent's"
EXIT_PLANNING = "the plan was still being made at exit"
ROUNDS = 6
ON_THREAD = "on the optmem-plan thread"


def reports_of(tmp, failures):
    """Every report in tmp, by pid, each checked against the schema."""
    out = {}
    for path in glob.glob(f"{tmp}/report.*.json"):
        report = json.load(open(path))
        try:
            validate(report)
        except SchemaError as e:
            failures.append(f"{path}: {e}")
        out[report["process"]["pid"]] = report
    return out


def fork_case(args):
    cmd = [args.program, "fork_each", "60"]
    rc, plain_out, plain_err = run(cmd, plain_env())
    if rc != 0:
        sys.exit(f"FAIL: the program fails without optmem ({rc}):\n{plain_err}")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(plain_env(), LD_PRELOAD=args.preload, OPTMEM_MODE="plan", OPTMEM_VERIFY="1",
                   OPTMEM_LOG="debug", OPTMEM_PLAN_THREAD="1",
                   OPTMEM_REPORT=f"{tmp}/report.%p.json")
        err, failures = run_under_optmem(cmd, env, plain_out)
        reports = reports_of(tmp, failures)
    if len(reports) != 25:
        failures.append(f"{len(reports)} reports, not 25 (the parent's and 24 children's)")
    if not reports:
        return failures
    parent = reports[min(reports)]["serving"]
    children = [r["serving"] for pid, r in reports.items() if pid != min(reports)]
    dropped = err.count(FORK_DROPPED)
    print(f"fork: {dropped} children dropped a search under way; parent {json.dumps(parent)}")
    if dropped < 1:
        failures.append("no fork came while a plan was being made: nothing is checked")
    if ON_THREAD not in err:
        failures.append("no plan was made on the optmem-plan thread")
    if parent["plans"] < 1 or parent["served_from_plan"] * 2 < parent["serving_requests"]:
        failures.append(f"the parent did not install and serve its plan: {parent}")
    # Every child trains 100 iterations alone: enough to learn and plan, whatever the
    # parent's phase was at its fork.
    unplanned = [c for c in children if c["plans"] < 1]
    if unplanned:
        failures.append(f"{len(unplanned)} children made no plan of their own: {unplanned[0]}")
    return failures


def exit_case(args):
    failures = []
    ended_planning = runs = 0
    # Whether a run's exit meets its search is a race (a small plan is found in microseconds):
    # the runs go round again, up to ROUNDS times, until one has met it.
    for iterations in [i for _ in range(ROUNDS) for i in range(3, 15)]:
        if ended_planning and runs % 12 == 0:
            break
        runs += 1
        cmd = [args.program, "steady", str(iterations)]
        rc, plain_out, plain_err = run(cmd, plain_env())
        if rc != 0:
            sys.exit(f"FAIL: the program fails without optmem ({rc}):\n{plain_err}")
        with tempfile.TemporaryDirectory() as tmp:
            plan = f"{tmp}/plan.bin"
            env = dict(plain_env(), LD_PRELOAD=args.preload, OPTMEM_MODE="plan",
                       OPTMEM_VERIFY="1", OPTMEM_LOG="info", OPTMEM_PLAN_FILE=plan,
                       OPTMEM_PLAN_THREAD="1",
                       OPTMEM_REPORT=f"{tmp}/report.%p.json")
            err, fails = run_under_optmem(cmd, env, plain_out)
            failures += [f"{iterations} iterations: {f}" for f in fails]
            if not reports_of(tmp, failures):
                failures.append(f"{iterations} iterations: no report")
            planning = EXIT_PLANNING in err
            ended_planning += planning
            if planning and os.path.exists(plan):
                failures.append(f"{iterations} iterations: a plan file was written while its "
                                "plan was being made")
            if os.path.exists(plan):  # the saved plan must load and serve
                os.rename(f"{tmp}/plan.bin", f"{tmp}/saved.bin")
                env = dict(env, OPTMEM_PLAN_FILE=f"{tmp}/saved.bin",
                           OPTMEM_REPORT=f"{tmp}/again.%p.json")
                err, fails = run_under_optmem([args.program, "steady", "20"], env,
                                              run([args.program, "steady", "20"], plain_env())[1])
                failures += [f"{iterations} iterations, saved plan: {f}" for f in fails]
                again = [json.load(open(p)) for p in glob.glob(f"{tmp}/again.*.json")]
                if not again or again[0]["serving"]["saved_plan"] != 1:
                    failures.append(f"{iterations} iterations: the saved plan was not served")
    print(f"exit: {ended_planning} of {runs} runs ended while their plan was being made")
    if ended_planning < 1:
        failures.append("no run ended while its plan was being made: nothing is checked")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--case", choices=("fork", "exit"), required=True)
    args = ap.parse_args()
    failures = fork_case(args) if args.case == "fork" else exit_case(args)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
