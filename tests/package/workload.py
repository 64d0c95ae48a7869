"""Workload of the package test: a loop of buffers above OPTMEM_MIN_BYTES, then which
liboptmem.so the process has mapped and what LD_PRELOAD it was given, as JSON on stdout.
Usage: workload.py [STEPS [--until-eof]]: with --until-eof, more steps after STEPS until stdin
ends (the test closes it once the run's report shows a plan)."""

import json
import os
import select
import sys

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
UNTIL_EOF = sys.argv[2:3] == ["--until-eof"]
SIZES = (65536, 131072, 98304, 262144)


def stdin_ended():
    if not select.select([0], [], [], 0)[0]:
        return False
    return os.read(0, 256) == b""


kept = None
step = 0
while step < STEPS or (UNTIL_EOF and not stdin_ended()):
    temps = [bytearray(n) for n in SIZES]
    for t in temps:
        t[0] = step & 0xFF
    kept = bytearray(49152)  # lives into the next step
    del temps
    step += 1

with open("/proc/self/maps") as f:
    mapped = sorted({line.split()[-1] for line in f
                     if line.rstrip().endswith("/liboptmem.so")})
json.dump({"steps": step, "requests": step * (len(SIZES) + 1),
           "ld_preload": os.environ.get("LD_PRELOAD", ""), "mapped": mapped}, sys.stdout)
print()
