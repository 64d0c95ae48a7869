#!/usr/bin/env python3
"""Runs a program plain and in plan mode under OPTMEM_VERIFY=1: same output, and every
process's report shows no verify violation, no invalid free and blocks served from the plan."""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--processes", type=int, default=1, help="reports expected (forks)")
    ap.add_argument("--min-served", type=int, default=1,
                    help="blocks that must come from a plan (0 for programs with no loop)")
    ap.add_argument("command", nargs="+")
    a = ap.parse_args()
    plain = subprocess.run(a.command, capture_output=True, text=True, env={
        k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    if plain.returncode != 0:
        sys.exit("FAIL: the program fails without optmem:\n" + plain.stdout + plain.stderr)
    failures = []
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, LD_PRELOAD=a.preload, OPTMEM_MODE="plan", OPTMEM_VERIFY="1",
                   OPTMEM_REPORT=os.path.join(work, "r.%p.json"))
        run = subprocess.run(a.command, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            failures.append(f"exit status {run.returncode} under optmem:\n{run.stderr}")
        if sorted(run.stdout.splitlines()) != sorted(plain.stdout.splitlines()):
            failures.append(f"output differs:\nplain:\n{plain.stdout}optmem:\n{run.stdout}")
        reports = sorted(glob.glob(os.path.join(work, "r.*.json")))
        if len(reports) != a.processes:
            failures.append(f"{len(reports)} reports, expected {a.processes}")
        served = 0
        for path in reports:
            with open(path) as f:
                r = json.load(f)
            s = r.get("serving") or {}
            pid = r["process"]["pid"]
            print(f"pid {pid}: served_from_plan {s.get('served_from_plan')} fallbacks "
                  f"{s.get('fallbacks')} verify_violations {s.get('verify_violations')} "
                  f"invalid_frees {s.get('invalid_frees')}")
            if s.get("verify_violations") != 0:
                failures.append(f"pid {pid}: verify_violations {s.get('verify_violations')}")
            if s.get("invalid_frees") != 0:
                failures.append(f"pid {pid}: invalid_frees {s.get('invalid_frees')}")
            served += s.get("served_from_plan") or 0
        if served < a.min_served:
            failures.append(f"{served} blocks served from a plan, expected {a.min_served}+")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("ok:", plain.stdout.strip().replace("\n", "; "))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
