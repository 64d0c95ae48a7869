"""Workload of the package test: a loop of buffers above OPTMEM_MIN_BYTES, then which
liboptmem.so the process has mapped and what LD_PRELOAD it was given, as JSON on stdout."""

import json
import os
import sys

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
SIZES = (65536, 131072, 98304, 262144)

kept = None
for step in range(STEPS):
    temps = [bytearray(n) for n in SIZES]
    for t in temps:
        t[0] = step & 0xFF
    kept = bytearray(49152)  # lives into the next step
    del temps

with open("/proc/self/maps") as f:
    mapped = sorted({line.split()[-1] for line in f
                     if line.rstrip().endswith("/liboptmem.so")})
json.dump({"steps": STEPS, "requests": STEPS * (len(SIZES) + 1),
           "ld_preload": os.environ.get("LD_PRELOAD", ""), "mapped": mapped}, sys.stdout)
print()
