"""Check that bench/calltime.c's library forwards every call to the allocator behind it and writes a valid report, of the whole run and of the calls after the program's phase mark (counts, never times)."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Far above anything the interpreter requests while starting, so that the counts are exactly
# the child's own calls.
MIN_BYTES = 3 << 20
BLOCK = 4 << 20
N = 20

CHILD = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None)
for name, res, args in (("malloc", ctypes.c_void_p, [ctypes.c_size_t]),
                        ("calloc", ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]),
                        ("realloc", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
                        ("aligned_alloc", ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]),
                        ("memalign", ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]),
                        ("free", None, [ctypes.c_void_p])):
    getattr(libc, name).restype, getattr(libc, name).argtypes = res, args
libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
N, BLOCK = int(sys.argv[1]), int(sys.argv[2])

def filled(p, byte, size):
    assert p, "allocation failed"
    ctypes.memset(p, byte, size)
    return p

def check(p, byte, size):
    # One byte per page, read in place: a copy of the block would be a counted request.
    view = (ctypes.c_ubyte * size).from_address(p)
    assert all(view[i] == byte for i in range(0, size, 4096)) and view[size - 1] == byte, "contents lost"

mark = libc.calltime_phase_mark
mark.restype, mark.argtypes = None, []
for i in range(N):
    if i == N // 2:
        mark()  # the "phase" histograms count the calls from here on
    p = filled(libc.malloc(BLOCK), 1, BLOCK)
    p = libc.realloc(p, 2 * BLOCK)          # grows: contents kept
    check(p, 1, BLOCK)
    libc.free(p)
    z = libc.calloc(BLOCK, 1)
    check(z, 0, BLOCK)
    libc.free(z)
    a = libc.aligned_alloc(4096, BLOCK)
    assert a and a % 4096 == 0
    libc.free(filled(a, 2, BLOCK))
    m = libc.memalign(65536, BLOCK)
    assert m and m % 65536 == 0
    libc.free(filled(m, 3, BLOCK))
    out = ctypes.c_void_p()
    assert libc.posix_memalign(ctypes.byref(out), 64, BLOCK) == 0 and out.value % 64 == 0
    libc.free(filled(out.value, 4, BLOCK))
    libc.free(filled(libc.malloc(100), 5, 100))   # below the threshold: not counted
pid = os.fork()
if pid == 0:                        # the child counts only its own calls
    libc.free(filled(libc.malloc(BLOCK), 6, BLOCK))
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0
print("ok")
"""


def fail(msg):
    print("calltime_check: " + msg, file=sys.stderr)
    sys.exit(1)


def check_report(path, expect, expect_phase):
    """The report parses, its histograms add up to its counts, and the counts are expect's, those
    after the phase mark expect_phase's."""
    report = json.loads(Path(path).read_text())
    if report.get("tool") != "calltime" or report.get("min_bytes") != MIN_BYTES:
        fail("%s: wrong header %r" % (path, {k: report.get(k) for k in ("tool", "min_bytes")}))
    if not isinstance(report.get("phase_mark_ms"), float) or report["phase_mark_ms"] <= 0:
        fail("%s: phase_mark_ms is %r, not the time of the mark" % (path, report.get("phase_mark_ms")))
    check_kinds(path, report["kinds"], expect)
    check_kinds("%s (phase)" % path, report["phase"], expect_phase)


def check_kinds(path, kinds, expect):
    """One set of histograms: each adds up to its count, and the counts are expect's."""
    for kind, stats in kinds.items():
        in_hist = sum(c for _, _, c in stats["hist"])
        if in_hist != stats["count"]:
            fail("%s: %s histogram holds %d calls, count says %d" % (path, kind, in_hist, stats["count"]))
        lows = [low for low, _, _ in stats["hist"]]
        if lows != sorted(lows) or any(low > high for low, high, _ in stats["hist"]):
            fail("%s: %s buckets out of order" % (path, kind))
    counts = {k: v["count"] for k, v in kinds.items()}
    if counts != expect:
        fail("%s: counts %r, expected %r" % (path, counts, expect))


def main():
    if len(sys.argv) < 3:
        fail("usage: calltime_check.py CALLTIME_SO PYTHON [ALLOCATOR_SO]")
    lib, python, behind = sys.argv[1], sys.argv[2], sys.argv[3:]
    with tempfile.TemporaryDirectory(prefix="calltime-check-") as tmp:
        env = {k: v for k, v in os.environ.items()
               if k != "LD_PRELOAD" and not k.startswith(("OPTMEM_", "CALLTIME_"))}
        env.update(LD_PRELOAD=":".join([lib] + behind), CALLTIME_OUT=os.path.join(tmp, "%p.json"),
                   CALLTIME_MIN_BYTES=str(MIN_BYTES))
        bad = subprocess.run([python, "-c", "pass"], env=dict(env, CALLTIME_MIN_BYTES="4k"),
                             capture_output=True, text=True, timeout=60)
        if bad.returncode != 1 or "CALLTIME_MIN_BYTES" not in bad.stderr:
            fail("CALLTIME_MIN_BYTES=4k: exit %d, stderr %r; expected exit 1 and one line naming it"
                 % (bad.returncode, bad.stderr))
        proc = subprocess.Popen([python, "-c", CHILD, str(N), str(BLOCK)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0 or out.strip() != "ok":
            fail("child exited %d: %s" % (proc.returncode, err.strip()[-500:]))
        reports = sorted(Path(tmp).glob("*.json"))
        parent = Path(tmp) / ("%d.json" % proc.pid)
        if parent not in reports or len(reports) != 2:
            fail("expected the reports of the child and its fork, found %s" % [p.name for p in reports])
        after = N - N // 2
        check_report(parent, {"malloc": N, "calloc": N, "realloc": N, "aligned": 3 * N, "free": 5 * N},
                     {"malloc": after, "calloc": after, "realloc": after, "aligned": 3 * after,
                      "free": 5 * after})
        forked = [p for p in reports if p != parent][0]
        one = {"malloc": 1, "calloc": 0, "realloc": 0, "aligned": 0, "free": 1}
        check_report(forked, one, one)  # forked after the mark: its calls are all after it
    print("calltime_check: ok (%s)" % (" -> ".join(["calltime"] + [Path(b).name for b in behind])))


if __name__ == "__main__":
    main()
