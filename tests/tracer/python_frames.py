"""Checks that call sites carry the allocating thread's Python frames.

python: runs a script under LD_PRELOAD=liboptmem.so OPTMEM_MODE=trace that allocates buffers
of distinct sizes from known lines (numpy, bytearray, a generator, a ctypes call that runs
without the GIL, a Python thread, one function under two callers) and from a thread that
runs no Python (pthread_create straight into malloc); each site must name its function,
file and line innermost first (the native thread none), and `optmem report` must name the
lines. native: a C program's
sites carry no Python frames. broken: fake_python.c's hand-made 3.11 frames, broken one way
per request size, give the frames that can be read and never a crash; a layout that does
not fit turns Python frames off with one warning. Exit status 0 on success.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_schema  # noqa: E402

SCRIPT = r'''
import ctypes
import threading

import numpy as np

MiB = 1 << 20
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p]
libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.POINTER(ctypes.c_void_p)]


def with_numpy(n):
    return np.ones(n, dtype=np.uint8)  # @numpy


def with_bytearray(n):
    return bytearray(n)  # @bytearray


def generator(n):
    yield bytearray(n)  # @generator


def without_gil(n):
    p = libc.malloc(n)  # @ctypes
    libc.free(p)


def in_thread(n, out):
    out.append(bytearray(n))  # @thread


def native_thread(n):
    tid, ret = ctypes.c_ulong(), ctypes.c_void_p()
    start = ctypes.cast(libc.malloc, ctypes.c_void_p)
    libc.pthread_create(ctypes.byref(tid), None, start, ctypes.c_void_p(n))
    libc.pthread_join(tid, ctypes.byref(ret))
    libc.free(ret)


def größe(n):
    return bytearray(n)  # @latin1


def 大きさ(n):
    return bytearray(n)  # @wide


def shared_leaf(n):
    return bytearray(n)  # @shared


def caller_a(n):
    return shared_leaf(n)  # @caller_a


def caller_b(n):
    return shared_leaf(n)  # @caller_b


def step(k):
    kept = [with_numpy(3 * MiB + 4096 * k), with_bytearray(5 * MiB + 4096 * k),
            next(generator(7 * MiB + 4096 * k))]
    without_gil(9 * MiB + 4096 * k)
    out = []
    t = threading.Thread(target=in_thread, args=(11 * MiB + 4096 * k, out))
    t.start()
    t.join()
    native_thread(13 * MiB + 4096 * k)
    größe(15 * MiB + 4096 * k)
    大きさ(17 * MiB + 4096 * k)
    for j in range(2):  # the same innermost frame, at the same address, under two callers
        caller_a(19 * MiB + 4096 * j)
        caller_b(21 * MiB + 4096 * j)
    return kept + out


for k in range(3):
    step(k)
'''

# marker -> (function, megabytes of its requests)
EXPECTED = {"numpy": ("with_numpy", 3), "bytearray": ("with_bytearray", 5),
            "generator": ("generator", 7), "ctypes": ("without_gil", 9),
            "thread": ("in_thread", 11), "latin1": ("größe", 15), "wide": ("大きさ", 17)}
NATIVE_MIB = 13


class CheckError(Exception):
    pass


def run_traced(preload, argv, tmp):
    env = dict(os.environ)
    report = os.path.join(tmp, "report.json")
    env.update({"LD_PRELOAD": preload, "OPTMEM_MODE": "trace", "OPTMEM_REPORT": report})
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise CheckError("%s exited with %d:\n%s" % (argv, proc.returncode, proc.stderr[-3000:]))
    with open(report) as f:
        r = json.load(f)
    report_schema.validate(r)
    return report_schema.expand(r), report


def sites_of_mib(report, mib):
    """Sites whose requests are all mib MiB plus a multiple of 4 KiB (the script's sizes)."""
    return [s for s in report["sites"]
            if s["count"] and s["min_size"] >> 20 == mib and s["max_size"] >> 20 == mib]


def check_python(args, tmp):
    script = os.path.join(tmp, "alloc.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(SCRIPT)
    lines = {}
    for no, text in enumerate(SCRIPT.split("\n"), start=1):
        if "# @" in text:
            lines[text.split("# @")[1].strip()] = no
    report, path = run_traced(args.preload, [args.python, script], tmp)
    for marker, (function, mib) in EXPECTED.items():
        sites = sites_of_mib(report, mib)
        if not sites:
            raise CheckError("%s: no call site of %d MiB requests" % (marker, mib))
        for s in sites:
            py = s["python"]
            if not py:
                raise CheckError("%s: site %d has no Python frames" % (marker, s["id"]))
            # np.ones is Python code of numpy's: the script's frame comes after it.
            first = 1 if marker == "numpy" else 0
            if marker == "numpy" and py[0]["function"] != "ones":
                raise CheckError("numpy: innermost Python frame %r, expected numpy's ones" % py[0])
            want = {"file": script, "line": lines[marker], "function": function}
            got = {k: py[first][k] for k in want}
            if got != want:
                raise CheckError("%s: Python frame %d is %r, expected %r" % (marker, first, got, want))
            if marker != "thread" and not any(f["function"] == "step" for f in py[1:]):
                raise CheckError("%s: the caller step() is not among %r" % (marker, py))
    # Same native path (bytearray's), different Python frames: different sites.
    ba = {s["id"] for s in sites_of_mib(report, 5)}
    gen = {s["id"] for s in sites_of_mib(report, 7)}
    if ba & gen:
        raise CheckError("bytearray and generator requests share a site")
    # The walk's memo keeps stacks by their innermost frame: two stacks that share it are
    # still two sites, each with its own caller.
    for mib, caller in ((19, "caller_a"), (21, "caller_b")):
        sites = sites_of_mib(report, mib)
        if not sites:
            raise CheckError("%s: no call site of %d MiB requests" % (caller, mib))
        for s in sites:
            got = [(f["function"], f["line"]) for f in s["python"][:2]]
            want = [("shared_leaf", lines["shared"]), (caller, lines[caller])]
            if got != want:
                raise CheckError("%d MiB: Python frames %r, expected %r" % (mib, got, want))
    native = sites_of_mib(report, NATIVE_MIB)
    if not native:
        raise CheckError("no call site of the native thread's requests")
    for s in native:
        if s["python"]:
            raise CheckError("the native thread's site %d has Python frames %r" %
                             (s["id"], s["python"]))
    # Live at the peak (the native thread's block, the kept ones, the thread's): named by
    # their lines in the text report.
    text = subprocess.run([args.optmem, "report", path, "--top", "100"], capture_output=True,
                          text=True, timeout=60)
    if text.returncode != 0:
        raise CheckError("optmem report failed:\n" + text.stderr)
    for marker in ("numpy", "bytearray", "generator", "thread"):
        want = "alloc.py:%d %s" % (lines[marker], EXPECTED[marker][0])
        if want not in text.stdout:
            raise CheckError("optmem report does not name %r:\n%s" % (want, text.stdout[:4000]))


def check_native(args, tmp):
    report, _ = run_traced(args.preload, [args.program, "4"], tmp)
    if not report["sites"]:
        raise CheckError("no call sites")
    for s in report["sites"]:
        if s["python"]:
            raise CheckError("site %d of a C program has Python frames %r" % (s["id"], s["python"]))


INNER = ("/fake/model.py", 12, "inner")
OUTER = ("/fake/model.py", 19, "outer")
# fake_python.c's cases, by the MiB of their request.
BROKEN = {1: [INNER, OUTER], 2: [INNER], 3: [], 4: [], 5: [INNER], 6: [INNER] * 16,
          7: [("/fake/model.py", 0, "garbled"), OUTER], 8: [], 9: [], 10: [OUTER], 11: [],
          12: [], 13: [INNER, OUTER]}


def frames_of(site):
    return [(f["file"], f["line"], f["function"]) for f in site["python"]]


def check_broken(args, tmp):
    report, _ = run_traced(args.preload, [args.program, "cases"], tmp)
    for mib, want in BROKEN.items():
        sites = sites_of_mib(report, mib)
        if not sites:
            raise CheckError("case %d: no call site" % mib)
        for s in sites:
            if frames_of(s) != want:
                raise CheckError("case %d: Python frames %r, expected %r" %
                                 (mib, frames_of(s), want))
    os.mkdir(os.path.join(tmp, "bad"))
    bad, _ = run_traced(args.preload, [args.program, "bad-layout"], os.path.join(tmp, "bad"))
    for mib in (1, 2):
        sites = sites_of_mib(bad, mib)
        if not sites:
            raise CheckError("bad layout: case %d: no call site" % mib)
        for s in sites:
            if s["python"]:
                raise CheckError("bad layout: case %d has Python frames %r" % (mib, s["python"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("python")
    p.add_argument("--optmem", required=True)
    p.add_argument("--python", default=sys.executable)
    n = sub.add_parser("native")
    n.add_argument("program")
    b = sub.add_parser("broken")
    b.add_argument("program")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            {"python": check_python, "native": check_native, "broken": check_broken}[args.cmd](
                args, tmp)
        except CheckError as e:
            print("FAIL: %s" % e)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
