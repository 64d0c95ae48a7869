"""Runs a program plainly and under optmem's plan mode (checking mode on), requires the
same stdout and exit status 0 from both, and checks the report's serving counters."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tracer"))
from report_schema import SchemaError, validate  # noqa: E402


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def plain_env():
    """The environment without optmem: no LD_PRELOAD, no OPTMEM_* variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    env.pop("LD_PRELOAD", None)
    return env


def command(args):
    """The program to run: what follows the options, with an optional leading --."""
    return args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd


def run_under_optmem(cmd, env, plain_out, problems=("verify:", "double free")):
    """Runs cmd with env (optmem preloaded) and returns its stderr and its failures: an exit
    status other than 0, stdout other than the plain run's plain_out, or, where it exited 0, a
    problem optmem (or the program) reported on stderr, one of problems."""
    rc, out, err = run(cmd, env)
    failures = []
    if rc != 0:
        failures.append(f"exit status {rc} under optmem:\n{err}")
    if out != plain_out:
        failures.append("stdout differs from the plain run:\n--- plain\n" + plain_out +
                        "--- optmem\n" + out)
    if rc == 0 and any(p in err for p in problems):
        failures.append(f"problems reported on stderr:\n{err}")
    return err, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--min-plans", type=int, default=1)
    ap.add_argument("--max-plans", type=int, default=None)
    ap.add_argument("--min-replans", type=int, default=0)
    ap.add_argument("--max-replans", type=int, default=None)
    ap.add_argument("--min-reused-plans", type=int, default=0,
                    help="kept plans that served again when their phase came back")
    ap.add_argument("--min-guard", type=int, default=0,
                    help="guard rejections the scenario is built to cause")
    ap.add_argument("--min-served", type=float, default=0.0,
                    help="served_from_plan as a fraction of the requests made while serving")
    ap.add_argument("--min-iteration-served", type=float, default=0.0,
                    help="the same share within the served iterations, without the requests "
                         "made after the loop")
    ap.add_argument("--max-top-ratio", type=float, default=None,
                    help="the arena's top at exit over the lower bound: a plan laid over the "
                         "pages warm-up left free keeps it near the warm-up's footprint")
    ap.add_argument("--min-plan-budget-ms", type=int, default=0,
                    help="the search budget the last plan states on stderr: a plan may search "
                         "as long as an iteration took")
    ap.add_argument("--verify", type=int, default=1)
    ap.add_argument("--optmem-env", action="append", default=[], metavar="KEY=VAL",
                    help="an OPTMEM_* setting for the run under optmem")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = command(args)
    base = plain_env()
    rc, plain_out, plain_err = run(cmd, base)
    if rc != 0:
        sys.exit(f"FAIL: the program fails without optmem ({rc}):\n{plain_err}")

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(base, LD_PRELOAD=args.preload, OPTMEM_MODE="plan",
                   OPTMEM_VERIFY=str(args.verify), OPTMEM_LOG="info",
                   OPTMEM_REPORT=f"{tmp}/report.%p.json")
        env.update(kv.split("=", 1) for kv in args.optmem_env)
        err, failures = run_under_optmem(cmd, env, plain_out)
        reports = sorted(glob.glob(f"{tmp}/report.*.json"), key=os.path.getmtime)
        if not reports:
            sys.exit("FAIL: no report written\n" + err)
        # The process that made the plan (the first to start) is checked; others
        # (forked children) must still have written a readable report.
        main_report = min(reports, key=lambda p: json.load(open(p))["process"]["pid"])
        for path in reports:
            try:
                validate(json.load(open(path)))
            except SchemaError as e:
                failures.append(f"{path}: {e}")
        report = json.load(open(main_report))
        serving = report.get("serving")
        if serving is None:
            sys.exit("FAIL: the report has no serving section")
        requests = serving["serving_requests"]
        served = serving["served_from_plan"] / max(requests, 1)
        in_iterations = serving["iteration_served"] / max(serving["iteration_requests"], 1)
        budgets = [int(b) for b in re.findall(r"optmem: plan: .* budget (\d+) ms", err)]
        print(f"requests while serving {requests}, from the plan {serving['served_from_plan']} "
              f"({served:.3f}) {json.dumps(serving)}")
        checks = [
            (serving["plans"] >= args.min_plans, f"plans {serving['plans']} < {args.min_plans}"),
            (args.max_plans is None or serving["plans"] <= args.max_plans,
             f"plans {serving['plans']} > {args.max_plans}"),
            (serving["replans"] >= args.min_replans,
             f"replans {serving['replans']} < {args.min_replans}"),
            (args.max_replans is None or serving["replans"] <= args.max_replans,
             f"replans {serving['replans']} > {args.max_replans}"),
            (serving["reused_plans"] >= args.min_reused_plans,
             f"plans reused {serving['reused_plans']} < {args.min_reused_plans}"),
            (serving["guard_rejections"] >= args.min_guard,
             f"guard rejections {serving['guard_rejections']} < {args.min_guard}"),
            (served >= args.min_served, f"served fraction {served:.3f} < {args.min_served}"),
            (in_iterations >= args.min_iteration_served,
             f"served fraction in iterations {in_iterations:.3f} < {args.min_iteration_served}"),
            (serving["iteration_served"] <= serving["iteration_requests"] <= requests and
             serving["iteration_served"] <= serving["served_from_plan"],
             "the counters at the last iteration's end exceed the totals"),
            (args.max_top_ratio is None or
             serving["arena_top_bytes"] <= args.max_top_ratio * report["lower_bound_bytes"],
             f"arena top {serving['arena_top_bytes']} > {args.max_top_ratio} x the lower bound "
             f"{report['lower_bound_bytes']}"),
            (not args.min_plan_budget_ms or (budgets and budgets[-1] >= args.min_plan_budget_ms),
             f"plan budgets {budgets} ms: the last is not >= {args.min_plan_budget_ms}"),
            (serving["verify_violations"] == 0, "verify violations"),
            (serving["invalid_frees"] == 0, "invalid frees"),
        ]
        failures += [msg for ok, msg in checks if not ok]
        if failures:
            print("FAIL:", *failures, sep="\n")
            sys.exit(1)
        print(f"ok: same output as the plain run, {len(reports)} report(s)")


if __name__ == "__main__":
    main()
