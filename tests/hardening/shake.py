"""Runs a program many times under optmem and compares every run with plain runs, to find
what a single run misses (a race that crashes one run in twenty). Each run has a fresh
directory, core dumps on (a core lands in the process's cwd: read it with gdb) and
`nice -n 19`. A CPython module's verdict is its exit status and `Tests result:` line; a
program's is its exit status and stdout.

Usage: shake.py --preload LIBOPTMEM [--runs N] [--setting NAME=VAR=VALUE,VAR=VALUE ...]
                [--keep DIR] (--module test_x ... | -- COMMAND ...)
Default settings: rep512 (plan, OPTMEM_MIN_BYTES=512, a report from every process),
huge512 (plan, 512, OPTMEM_HUGEPAGES=1), inline512 (rep512 with OPTMEM_PLAN_THREAD=0),
default (plan, a report). Prints one line per (what, setting) with the runs that gave the
plain verdict, those that did not, and the cores; exit status 0 when every run agreed.
"""

import argparse
import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"
SETTINGS = {
    "rep512": {"OPTMEM_MODE": "plan", "OPTMEM_MIN_BYTES": "512", "OPTMEM_REPORT": "r.%p.json"},
    "huge512": {"OPTMEM_MODE": "plan", "OPTMEM_MIN_BYTES": "512", "OPTMEM_HUGEPAGES": "1"},
    "inline512": {"OPTMEM_MODE": "plan", "OPTMEM_MIN_BYTES": "512", "OPTMEM_REPORT": "r.%p.json",
                  "OPTMEM_PLAN_THREAD": "0"},
    "default": {"OPTMEM_MODE": "plan", "OPTMEM_REPORT": "r.%p.json"},
}
RUN_TIMEOUT_S = 1200
RESULT = re.compile(r"^(?:== )?Tests result: (\S+)", re.M)


def in_child():
    os.nice(19)
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    os.setsid()


def run_once(command, is_module, env):
    work = tempfile.mkdtemp(prefix="shake-")
    proc = subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=in_child)
    try:
        raw, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        status = f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the whole group goes
        raw, _ = proc.communicate()
        status = "timed out"
    out = raw.decode(errors="replace")
    if is_module:
        found = RESULT.findall(out)
        verdict = (status, found[-1] if found else "no result")
    else:
        verdict = (status, out)
    cores = glob.glob(os.path.join(work, "**", "core*"), recursive=True)
    return verdict, cores, out, work


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--plain-runs", type=int, default=2)
    ap.add_argument("--setting", action="append", default=[])
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--keep", help="where the directories of runs that differed are moved")
    ap.add_argument("command", nargs="*")
    args = ap.parse_args()
    if bool(args.module) == bool(args.command):
        ap.error("give --module or a command, not both")
    if args.plain_runs < 1:
        ap.error("--plain-runs: at least one plain run gives the verdict to compare with")
    settings = dict(SETTINGS)
    if args.setting:
        settings = {}
        for s in args.setting:
            name, _, vars_ = s.partition("=")
            settings[name] = dict(v.split("=", 1) for v in vars_.split(",") if v)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    base.pop("LD_PRELOAD", None)
    targets = [(m, [PYTHON, "-m", "test", m], True) for m in args.module]
    if args.command:
        targets = [(os.path.basename(args.command[0]), args.command, False)]
    disagreed = 0
    for name, command, is_module in targets:
        plain = set()
        for _ in range(args.plain_runs):
            verdict, _, _, work = run_once(command, is_module, base)
            plain.add(verdict)
            shutil.rmtree(work, ignore_errors=True)
        for sname, svars in settings.items():
            env = dict(base, LD_PRELOAD=os.path.abspath(args.preload), **svars)
            same = differ = ncores = 0
            for _ in range(args.runs):
                verdict, cores, out, work = run_once(command, is_module, env)
                ncores += len(cores)
                if verdict in plain and not cores:
                    same += 1
                    shutil.rmtree(work, ignore_errors=True)
                    continue
                differ += 1
                print(f"  {name} {sname}: {verdict[0]} {verdict[1][-200:]!r}, cores {cores}",
                      flush=True)
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    with open(os.path.join(work, "shake-output.txt"), "w") as f:
                        f.write(out)
                    shutil.move(work, args.keep)
                else:
                    shutil.rmtree(work, ignore_errors=True)
            disagreed += differ
            print(f"{name:28s} {sname:10s} runs {args.runs}: same {same}, differ {differ}, "
                  f"cores {ncores}", flush=True)
    sys.exit(1 if disagreed else 0)


if __name__ == "__main__":
    main()
