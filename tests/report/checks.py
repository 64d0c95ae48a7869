"""What the report and snapshot checks share: a failed expectation, and optmem run with its exit status checked."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tracer"))
import report_schema  # noqa: E402


class CheckError(Exception):
    """A behaviour a check expected and did not see."""


def expect(cond, msg):
    if not cond:
        raise CheckError(msg)


def run_main(main):
    """Runs a check's main: a CheckError is one FAIL line and exit status 1."""
    try:
        main()
    except CheckError as e:
        print("FAIL", e)
        sys.exit(1)


def cli(args, argv, cwd=None, env=None, status=0, timeout=300):
    """Runs args.optmem with argv; its (stdout, stderr) once it exited with status."""
    proc = subprocess.run([args.optmem] + argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    expect(proc.returncode == status, "optmem %s: exit %d, expected %d\nstderr: %s" %
           (" ".join(argv), proc.returncode, status, err[-2000:]))
    return out, err


def load_report(path):
    """A lifetime report, its sites' frames in place whatever its version (report_schema.expand)."""
    with open(path) as f:
        return report_schema.expand(json.load(f))
