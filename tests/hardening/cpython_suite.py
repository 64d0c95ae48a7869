"""CPython's own regression suite (Debian's libpython3.11-testsuite) run plainly and under
optmem's plan mode with OPTMEM_MIN_BYTES=512: every module must get the same verdict, and
fail the same test cases, with and without optmem. Some modules fail on a given machine
without optmem too (a missing device, a network test): verdicts are compared, not
success.

Usage: cpython_suite.py --preload LIBOPTMEM [--module test_x ...] [--all] [--report]
  --all      every module of the suite (the release check: hours on 2 cores)
  --report   OPTMEM_REPORT set too (a report and its checkpoints from every process)
Exit status 0 when every verdict matches.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
# The signal, process, thread and descriptor modules where optmem once showed, two that
# allocate a lot, and test_random (a third of its runs crashed in plan mode with
# OPTMEM_MIN_BYTES=512 while optmem named its detached threads from outside); a few
# minutes in all, twice, on 2 cores.
DEFAULT_MODULES = ("test_signal", "test_subprocess", "test_threading", "test_os",
                   "test_posix", "test_json", "test_re", "test_random")
MODULE_TIMEOUT_S = 1200
CASE = re.compile(r"^(FAIL|ERROR): (\S+) \((\S+)\)", re.M)
RESULT = re.compile(r"^Tests result: (.+)$", re.M)


def run_module(module, env, tmp):
    start = time.monotonic()
    # A module that hangs (a network test without a network) is a verdict of its own, and
    # its whole process group goes, so that the next module starts clean.
    proc = subprocess.Popen([PYTHON, "-m", "test", "-v", module], env=env, cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        raw, _ = proc.communicate(timeout=MODULE_TIMEOUT_S)
        ended = f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raw, _ = proc.communicate()
        ended = f"timed out after {MODULE_TIMEOUT_S} s"
    out = raw.decode(errors="replace")
    found = RESULT.findall(out)
    verdict = found[-1].strip() if found else f"no result ({ended})"
    cases = sorted({m.group(3) for m in CASE.finditer(out)})
    return verdict, cases, time.monotonic() - start, out


def all_modules():
    test_dir = "/usr/lib/python3.11/test"
    return sorted(n[:-3] if n.endswith(".py") else n for n in os.listdir(test_dir)
                  if n.startswith("test_") and (n.endswith(".py") or
                                                os.path.isdir(os.path.join(test_dir, n))))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--module", action="append")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir("/usr/lib/python3.11/test/libregrtest"):
        sys.exit("FAIL: CPython's test suite is missing: apt-get install libpython3.11-testsuite")
    modules = all_modules() if args.all else (args.module or DEFAULT_MODULES)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    base.pop("LD_PRELOAD", None)
    mismatches = []
    with tempfile.TemporaryDirectory() as tmp:
        under = dict(base, LD_PRELOAD=os.path.abspath(args.preload), OPTMEM_MODE="plan",
                     OPTMEM_MIN_BYTES="512")
        if args.report:
            under["OPTMEM_REPORT"] = os.path.join(tmp, "report.%p.json")
        print(f"{'module':24} {'plain':16} {'optmem':16} {'plain s':>8} {'optmem s':>8}")
        for module in modules:
            pv, pc, pt, _ = run_module(module, base, tmp)
            ov, oc, ot, out = run_module(module, under, tmp)
            same = pv == ov and pc == oc
            print(f"{module:24} {pv:16} {ov:16} {pt:8.1f} {ot:8.1f}{'' if same else '  DIFFERS'}",
                  flush=True)
            if not same:
                mismatches.append(module)
                print(f"  plain fails {pc}\n  optmem fails {oc}")
                print("  " + "\n  ".join(out.splitlines()[-40:]))
    if mismatches:
        sys.exit(f"FAIL: verdicts differ under optmem: {' '.join(mismatches)}")
    print(f"{len(modules)} modules: the same verdicts with and without optmem")


if __name__ == "__main__":
    main()
