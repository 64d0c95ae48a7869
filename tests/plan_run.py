"""One run of a bundled workload in plan mode, with its report, for the tests that check
what plan mode does to the process (relearn_pages.py, plan_faults.py)."""

import json
import os
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"
WORKLOADS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads")


def run_plan_mode(test, preload, workload, steps):
    """Runs tests/workloads/WORKLOAD.py for steps steps under preload in plan mode. Returns
    its OPTMEM_RESULT dict and the report; exits naming test if the workload fails."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
        env.update(LD_PRELOAD=os.path.abspath(preload), OPTMEM_MODE="plan",
                   OPTMEM_REPORT=report)
        out = subprocess.run([PYTHON, os.path.join(WORKLOADS, workload + ".py"), "--steps",
                              str(steps), "--json"], env=env, capture_output=True, text=True,
                             timeout=300)
        if out.returncode != 0:
            sys.exit("%s: the workload failed (%d): %s"
                     % (test, out.returncode, out.stderr[-2000:]))
        line = [l for l in out.stdout.splitlines() if l.startswith("OPTMEM_RESULT ")][-1]
        with open(report) as f:
            return json.loads(line.split(" ", 1)[1]), json.load(f)


def exit_status(test, failures):
    """Prints each failure naming test; the exit status: 1 if there were any, else 0."""
    for f in failures:
        print("%s: %s" % (test, f), file=sys.stderr)
    return 1 if failures else 0
