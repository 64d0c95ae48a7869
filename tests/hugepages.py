"""Checks OPTMEM_HUGEPAGES: with 1, the region of a plan is marked for transparent huge
pages (VmFlags "hg" in /proc/self/smaps) and the program's output is unchanged; with 0
(the default), nothing of the process is.

Usage: hugepages.py --preload LIBOPTMEM. Exit status 0 on success.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"
# Without this the kernel has no transparent huge pages and refuses the advice: then the
# option must change nothing.
THP_SYSFS = "/sys/kernel/mm/transparent_hugepage"

# A training-like loop of managed requests (bytearrays of 512 KiB to 2 MiB); after it, the
# bytes of the mappings marked "hg", read in 2 KiB chunks so that reading makes no request
# optmem manages (4 KiB and more).
CHILD = r"""
import os
total = 0
for step in range(40):
    a = bytearray(1 << 20)
    b = bytearray(2 << 20)
    a[0] = step
    c = bytearray(512 << 10)
    total += a[0] + len(b) + len(c)
    del a
    d = bytearray(1 << 20)
    del b, c, d
fd = os.open("/proc/self/smaps", os.O_RDONLY)
text = b""
while True:
    chunk = os.read(fd, 2048)
    if not chunk:
        break
    text += chunk
os.close(fd)
marked, size = 0, 0
for line in text.split(b"\n"):
    fields = line.split()
    if fields and fields[0] == b"Size:":
        size = int(fields[1])
    elif fields and fields[0] == b"VmFlags:" and b"hg" in fields[1:]:
        marked += size
print(total, marked)
"""


def run(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    env.update(env_extra)
    out = subprocess.run([PYTHON, "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        sys.exit("hugepages: child failed (%d): %s" % (out.returncode, out.stderr[-2000:]))
    total, marked = out.stdout.split()
    return total, int(marked)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()
    lib = os.path.abspath(args.preload)
    failures = []
    plain_total, _ = run({})
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        total, marked = run({"LD_PRELOAD": lib, "OPTMEM_MODE": "plan", "OPTMEM_HUGEPAGES": "1",
                             "OPTMEM_REPORT": report})
        plans = json.load(open(report))["serving"]["plans"]
    _, marked_default = run({"LD_PRELOAD": lib, "OPTMEM_MODE": "plan"})
    print("hugepages: %d plan(s), %d KiB marked with OPTMEM_HUGEPAGES=1, %d KiB without"
          % (plans, marked, marked_default))
    if total != plain_total:
        failures.append("output %s, %s without optmem" % (total, plain_total))
    if plans < 1:
        failures.append("no plan was made: nothing to mark")
    elif not os.path.isdir(THP_SYSFS):
        if marked:
            failures.append("%d KiB marked on a kernel without huge pages" % marked)
    elif marked < 2048:  # the loop's plan needs at least 2 MiB
        failures.append("the plan's region is not marked for huge pages")
    if marked_default:
        failures.append("%d KiB marked without OPTMEM_HUGEPAGES" % marked_default)
    for f in failures:
        print("hugepages: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
