"""Runs a program that goes on until its stdin ends, and ends it once its report (a checkpoint,
written while it runs) shows a plan made: the plan is searched on the optmem-plan thread, and
when it is taken is a matter of scheduling, not of the program's iteration count."""
import glob
import json
import subprocess
import time

POLL_S = 0.05


def plans_in(pattern):
    """The most plans any report matching pattern shows; one being written reads as none."""
    most = 0
    for path in glob.glob(pattern):
        try:
            with open(path) as f:
                serving = json.load(f).get("serving") or {}
        except (OSError, ValueError):
            continue
        most = max(most, serving.get("plans", 0))
    return most


def run_until_plan(cmd, report_pattern, env=None, cwd=None, timeout=120):
    """Starts cmd with a pipe for its stdin, closes the pipe once a report matching
    report_pattern shows a plan (or cmd ended, or timeout seconds passed) and waits for cmd.
    Returns (exit status, stdout, stderr, whether a plan was seen before the pipe closed)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd)
    deadline = time.monotonic() + timeout
    seen = False
    while proc.poll() is None and time.monotonic() < deadline:
        if plans_in(report_pattern) > 0:
            seen = True
            break
        time.sleep(POLL_S)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode(), seen
