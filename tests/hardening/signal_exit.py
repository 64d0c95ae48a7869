"""A signal handler that calls _exit (async-signal-safe, so allowed anywhere) while its
thread is inside optmem, holding the locks that a report needs: in an allocator call, and
between a fork's handlers. The process must end as without optmem (exit status 3), not
wait forever for a lock its own thread holds.

Usage: signal_exit.py --preload LIBOPTMEM --program signal_exit --shim signal_exit_shim.so
Exit status 0 when every run ends with status 3.
"""

import argparse
import os
import subprocess
import sys
import tempfile

TIMEOUT_S = 30


def run(args, case, preload, mode, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    env["LD_PRELOAD"] = preload
    if mode:
        env.update(OPTMEM_MODE=mode, OPTMEM_REPORT=os.path.join(tmp, f"{case}-{mode}.%p.json"))
    try:
        proc = subprocess.run([args.program, case], env=env, timeout=TIMEOUT_S,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        return f"hung (killed after {TIMEOUT_S} s)"
    if proc.returncode == 0:
        return "exit 0: the signal never came (the shim found no call to raise it from)"
    if proc.returncode != 3:
        return f"exit {proc.returncode}: {proc.stdout.decode(errors='replace')[-500:]}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--shim", required=True)
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # Without optmem the fork handler raises the signal too (no allocator call does).
        err = run(args, "fork", args.shim, None, tmp)
        if err:
            failures.append(f"fork, plain: {err}")
        # The shim after optmem: it is initialised first, so its fork handler runs last,
        # once optmem's has taken its locks.
        for case in ("calls", "fork"):
            for mode in ("trace", "plan"):
                err = run(args, case, f"{args.preload} {args.shim}", mode, tmp)
                print(f"{case:6s} {mode:6s} {err or 'exit 3'}", flush=True)
                if err:
                    failures.append(f"{case}, {mode}: {err}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
