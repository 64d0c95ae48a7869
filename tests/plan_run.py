"""One run of a bundled workload in plan mode, with its report, for the tests that check
what plan mode does to the process (relearn_pages.py, plan_faults.py, saved_plan_exit.py)."""

import json
import os
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"
WORKLOADS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads")


def run_plan_mode(test, preload, workload, steps, plan_file=None, args=(), env_extra=None):
    """Runs tests/workloads/WORKLOAD.py for steps steps under preload in plan mode (with
    OPTMEM_PLAN_FILE=plan_file if given, the OPTMEM_* settings of env_extra, and the
    workload's own args). Returns its
    OPTMEM_RESULT dict, the report, and the process's peak RSS over its whole life in bytes
    (its rusage, exit included); exits naming test if the workload fails."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
        env.update(LD_PRELOAD=os.path.abspath(preload), OPTMEM_MODE="plan",
                   OPTMEM_REPORT=report)
        if plan_file:
            env["OPTMEM_PLAN_FILE"] = plan_file
        env.update(env_extra or {})
        out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen([PYTHON, os.path.join(WORKLOADS, workload + ".py"),
                                     "--steps", str(steps), "--json", *args], env=env,
                                    stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        with open(out_path) as f:
            stdout = f.read()
        if proc.returncode != 0:
            with open(err_path) as f:
                sys.exit("%s: the workload failed (%d): %s"
                         % (test, proc.returncode, f.read()[-2000:]))
        line = [l for l in stdout.splitlines() if l.startswith("OPTMEM_RESULT ")][-1]
        with open(report) as f:
            return json.loads(line.split(" ", 1)[1]), json.load(f), usage.ru_maxrss * 1024


def exit_status(test, failures):
    """Prints each failure naming test; the exit status: 1 if there were any, else 0."""
    for f in failures:
        print("%s: %s" % (test, f), file=sys.stderr)
    return 1 if failures else 0
