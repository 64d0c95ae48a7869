"""Checks that a real libcupti exports every CUPTI entry point cuda/cupti_abi.h declares, and
that cuda/cupti_inject.c resolves exactly those: the injection library finds them all at run
time. Usage: cupti_symbols.py CUPTI_ABI_H CUPTI_INJECT_C LIBCUPTI. Exit status 0 on success.
"""

import re
import subprocess
import sys


def main():
    abi_h, inject_c, lib = sys.argv[1:4]
    with open(abi_h) as f:
        declared = set(re.findall(r"\bom_(cupti[A-Z]\w*)_fn\b", f.read()))
    with open(inject_c) as f:
        resolved = set(re.findall(r'resolve\(lib, "(cupti\w+)"', f.read()))
    out = subprocess.run(["nm", "-D", "--defined-only", lib], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    # Versioned names (cuptiActivityEnable@@libcupti.so.13) count by their name.
    exported = {f[2].split("@")[0] for f in (line.split() for line in out.splitlines())
                if len(f) == 3}
    status = 0
    if not declared or declared != resolved:
        print("FAIL: cupti_abi.h declares %s, cupti_inject.c resolves %s" % (
            sorted(declared), sorted(resolved)))
        status = 1
    missing = sorted(declared - exported)
    if missing:
        print("FAIL: %s does not export %s" % (lib, missing))
        status = 1
    if status == 0:
        print("ok: %s exports the %d entry points the injection library resolves: %s" % (
            lib, len(declared), ", ".join(sorted(declared))))
    return status


if __name__ == "__main__":
    sys.exit(main())
