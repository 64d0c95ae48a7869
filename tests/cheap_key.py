"""Checks requests served by their cheap key (docs/serving.md, "Served by cheap key").

A C program (programs/cheap_key.c) whose two call sites share a cheap key alternates them,
then calls only the second: the cheap key would name the first site's slot for the second's
request. Its full-key check must mark the slot ambiguous (a collision counted), after which
the cheap key serves no request there: the first site is named in the report for at most one
check period (CHEAP_EVERY, preload/pool.c) more requests than it made, the second site too,
and no block overlaps another (OPTMEM_VERIFY=1). A Python program with deep stacks
(programs/deep_calls.py) is served by its cheap keys for most of its requests, and its report
names the same call sites with the same counts as a run in trace mode, where every request's
stack is captured. Run for a few iterations only, so that its plan serves a handful, the plan's
slots start with the cheap keys the iterations before it were seen with by their full keys: it
serves by cheap key from its first iteration on, where each slot's key would otherwise be
confirmed by three served iterations first (CHEAP_CONFIRM), and names the same call sites with
the same counts as trace mode.

Usage: cheap_key.py --preload LIBOPTMEM --program CHEAP_KEY. Exit status 0 on success.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tracer"))
import report_schema  # noqa: E402

CHEAP_EVERY = 64  # preload/pool.c
N1, N2 = 300, 1000
SHORT = 12  # deep_calls.py's iterations in the short run: its plan serves a few
DEEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "deep_calls.py")


def run(preload, argv, mode, verify=0):
    """Runs argv under preload in mode, the plan searched inline (the same plan at the same
    request in every run); returns the report, expanded to version 1."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
        env.update(LD_PRELOAD=os.path.abspath(preload), OPTMEM_MODE=mode, OPTMEM_REPORT=report,
                   OPTMEM_VERIFY=str(verify), OPTMEM_PLAN_THREAD="0")
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            sys.exit("cheap_key: %s failed (%d): %s" % (argv[0], proc.returncode,
                                                        proc.stderr[-2000:]))
        with open(report) as f:
            return report_schema.expand(json.load(f))


def count_of(report, function):
    """Requests of the call sites whose frames name function."""
    return sum(s["count"] for s in report["sites"]
               if any(f.get("function") == function for f in s["frames"]))


def site_key(site):
    """A call site as two runs of one program both name it."""
    native = tuple((os.path.basename(f.get("module") or "?"), f.get("offset"))
                   for f in site["frames"])
    python = tuple((p.get("file"), p.get("line"), p.get("function"))
                   for p in site.get("python", []))
    return native + python


def check_collision(preload, program):
    r = run(preload, [program, str(N1), str(N2)], "plan", verify=1)
    v = r["serving"]
    a, b = count_of(r, "cheap_key_site_a"), count_of(r, "cheap_key_site_b")
    print("cheap_key: collisions: %d requests served by cheap key, %d slots ambiguous; site a "
          "named for %d requests (made %d), site b for %d (made %d)"
          % (v["served_by_cheap_key"], v["cheap_key_collisions"], a, N1, b, N1 + 2 * N2))
    failures = []
    if v["served_by_cheap_key"] == 0:
        failures.append("no request was served by its cheap key: nothing is checked")
    if v["cheap_key_collisions"] == 0:
        failures.append("the cheap key that names two sites was never found ambiguous")
    if not N1 <= a <= N1 + CHEAP_EVERY:
        failures.append("site a named for %d requests, not %d to %d"
                        % (a, N1, N1 + CHEAP_EVERY))
    if a + b != 2 * N1 + 2 * N2:
        failures.append("sites a and b named for %d requests, %d made" % (a + b, 2 * N1 + 2 * N2))
    if v["verify_violations"] or v["invalid_frees"]:
        failures.append("verify: %d violations, %d invalid frees"
                        % (v["verify_violations"], v["invalid_frees"]))
    return failures


def check_python(preload):
    argv = ["/usr/bin/python3", DEEP, "1000"]
    plan, trace = run(preload, argv, "plan"), run(preload, argv, "trace")
    v = plan["serving"]
    print("cheap_key: python: %d of %d requests served while the plan served were served by "
          "cheap key" % (v["served_by_cheap_key"], v["serving_requests"]))
    failures = []
    if v["served_by_cheap_key"] * 2 < v["serving_requests"]:
        failures.append("python: only %d of %d requests served by cheap key"
                        % (v["served_by_cheap_key"], v["serving_requests"]))

    def loop_sites(r):  # the loop's sites: start-up's may differ from run to run
        return {site_key(s): s["count"] for s in r["sites"] if s["count"] >= 100}

    p, t = loop_sites(plan), loop_sites(trace)
    if not p or p != t:
        failures.append("python: the loop's call sites differ from trace mode's: %s against %s"
                        % (sorted(p.values()), sorted(t.values())))
    return failures


def check_short(preload):
    """A plan that serves a few iterations: its first one is served by cheap key already."""
    argv = ["/usr/bin/python3", DEEP, str(SHORT)]
    plan, trace = run(preload, argv, "plan", verify=1), run(preload, argv, "trace")
    v = plan["serving"]
    period = v["plan_slots"]
    print("cheap_key: short run: %d of %d requests served from a plan of %d slots were served by "
          "cheap key" % (v["served_by_cheap_key"], v["served_from_plan"], period))
    failures = []
    if v["served_from_plan"] < 2 * period:
        failures.append("short run: the plan served %d requests, not two iterations of %d: "
                        "nothing is checked" % (v["served_from_plan"], period))
    # Before the slots started with what the ring saw, the first three served iterations took
    # their full keys: here not one iteration's worth.
    if v["served_from_plan"] - v["served_by_cheap_key"] >= period:
        failures.append("short run: %d of the %d requests served took their full keys, an "
                        "iteration of %d or more" % (v["served_from_plan"] - v["served_by_cheap_key"],
                                                     v["served_from_plan"], period))
    if v["verify_violations"] or v["invalid_frees"]:
        failures.append("short run: verify: %d violations, %d invalid frees"
                        % (v["verify_violations"], v["invalid_frees"]))
    sites = lambda r: {site_key(s): s["count"] for s in r["sites"]  # noqa: E731
                       if any(p.get("function") in ("bottom", "mid") for p in s.get("python", []))}
    p, t = sites(plan), sites(trace)
    if not p or p != t:
        failures.append("short run: the loop's call sites differ from trace mode's: %s against %s"
                        % (sorted(p.values()), sorted(t.values())))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    failures = (check_collision(args.preload, args.program) + check_python(args.preload)
                + check_short(args.preload))
    for f in failures:
        print("cheap_key: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
