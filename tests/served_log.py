"""Checks that logging the served path changes nothing the report records (docs/serving.md,
"The served path's log").

Plan mode serves most of programs/served_log.c's requests by their cheap key and logs them and
the frees of arena blocks, the record being made later from the log; trace mode records every
call at once. The two reports, the one the program asks for halfway and the one written at
exit, must record the same: counts, sizes, lifetimes in requests and their categories, call
sites, the peak, the iterations found, the timeline, the sample's births and deaths.

Usage: served_log.py --preload LIBOPTMEM --program SERVED_LOG. Exit status 0 on success.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tracer"))
import report_schema  # noqa: E402

ITERATIONS = 400


def run(preload, program, mode):
    """The program's reports (halfway, at exit) under preload in mode, expanded to version 1."""
    with tempfile.TemporaryDirectory() as tmp:
        final, mid = os.path.join(tmp, "final.json"), os.path.join(tmp, "mid.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
        env.update(LD_PRELOAD=os.path.abspath(preload), OPTMEM_MODE=mode, OPTMEM_REPORT=final,
                   OPTMEM_PLAN_THREAD="0")
        proc = subprocess.run([program, str(ITERATIONS), mid], env=env, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode != 0:
            sys.exit("served_log: %s failed in %s mode (%d): %s"
                     % (program, mode, proc.returncode, proc.stderr[-2000:]))
        reports = []
        for path in (mid, final):
            with open(path) as f:
                reports.append(report_schema.expand(json.load(f)))
        return reports


def site_name(site):
    """A call site as both runs name it: its frames' functions."""
    return "/".join(f.get("function") or "?" for f in site["frames"])


def recorded(r):
    """What the report records that does not depend on addresses or times."""
    names = {s["id"]: site_name(s) for s in r["sites"]}
    sites = {}
    for s in r["sites"]:
        sites[names[s["id"]]] = {k: s[k] for k in (
            "count", "total_bytes", "min_size", "max_size", "live_blocks", "live_bytes", "freed",
            "lifetime_requests", "category_bytes", "category")}
    peak = dict(r["peak"])
    peak["sites"] = sorted((names[p["site"]], p["bytes"], p["blocks"]) for p in peak["sites"])
    sample = dict(r["sample"])
    sample["lifetimes"] = [[names[e[0]]] + e[1:4] for e in sample["lifetimes"]]
    iterations = json.loads(json.dumps(r["iterations"]))
    iterations.get("detector", {}).pop("thread", None)  # a thread id: another in each run
    return {
        "counters": r["counters"],
        "lower_bound_bytes": r["lower_bound_bytes"],
        "peak": peak,
        "iterations": iterations,
        "categories": r["categories"],
        "timeline": r["timeline"],
        "sites": sites,
        "sample": sample,
    }


def differences(a, b, where=""):
    """Paths at which a and b differ, with both values (at most a few)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k), b.get(k), "%s/%s" % (where, k))
        return out
    return [] if a == b else ["%s: plan %s, trace %s" % (where, json.dumps(a)[:200],
                                                         json.dumps(b)[:200])]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    plan, trace = run(args.preload, args.program, "plan"), run(args.preload, args.program,
                                                              "trace")
    failures = []
    for name, p, t in zip(("halfway", "at exit"), plan, trace):
        v = p["serving"]
        print("served_log: report %s: %d requests, %d served by cheap key"
              % (name, p["counters"]["managed_requests"], v["served_by_cheap_key"]))
        if v["served_by_cheap_key"] * 2 < p["counters"]["managed_requests"]:
            failures.append("report %s: only %d of %d requests served by cheap key: the log is "
                            "hardly used" % (name, v["served_by_cheap_key"],
                                             p["counters"]["managed_requests"]))
        if v["verify_violations"] or v["invalid_frees"]:
            failures.append("report %s: %d verify violations, %d invalid frees"
                            % (name, v["verify_violations"], v["invalid_frees"]))
        diff = differences(recorded(p), recorded(t))
        failures += ["report %s differs from trace mode's at %s" % (name, d) for d in diff[:10]]
    for f in failures:
        print("served_log: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
