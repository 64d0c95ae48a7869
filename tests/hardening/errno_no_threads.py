"""Where optmem cannot start its threads (pthread_create fails, as under a low RLIMIT_NPROC
or in a sandbox), the program still sees malloc that succeeds and free keep errno: a
training loop that plans and gives pages back (every mode and thread setting) and the
conformance program (its first managed request starts the checkpoint thread).

Usage: errno_no_threads.py --preload LIBOPTMEM --program errno_loop --conformance
       conformance --shim no_threads_shim.so
Exit status 0 when no call changed errno.
"""

import argparse
import os
import subprocess
import sys
import tempfile

CONFIGS = (
    {"OPTMEM_MODE": "plan", "OPTMEM_REPORT": "r.%p.json"},
    {"OPTMEM_MODE": "plan", "OPTMEM_PLAN_THREAD": "1"},
    {"OPTMEM_MODE": "plan", "OPTMEM_MIN_BYTES": "512", "OPTMEM_HUGEPAGES": "1"},
    {"OPTMEM_MODE": "trace", "OPTMEM_REPORT": "r.%p.json"},
)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--conformance", required=True)
    ap.add_argument("--shim", required=True)
    args = ap.parse_args()
    for a in ("preload", "program", "conformance", "shim"):
        setattr(args, a, os.path.abspath(getattr(args, a)))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in CONFIGS:
            env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
            env.update(cfg, LD_PRELOAD=f"{args.preload} {args.shim}")
            for cmd in ([args.program, "60"], [args.conformance]):
                proc = subprocess.run(cmd, env=env, cwd=tmp, timeout=120,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                out = proc.stdout.decode(errors="replace")
                name = " ".join(f"{k}={v}" for k, v in cfg.items())
                bad = [line for line in out.splitlines() if "FAIL" in line]
                print(f"{os.path.basename(cmd[0]):12s} {name}: exit {proc.returncode}"
                      + (f", {out.strip().splitlines()[-1]}" if cmd[0] == args.program else
                         f", {len(bad)} failed checks"), flush=True)
                if proc.returncode != 0:
                    failures.append(f"{cmd[0]} under {name}: exit {proc.returncode}\n"
                                    + "\n".join(bad or out.strip().splitlines()[-1:]))
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
