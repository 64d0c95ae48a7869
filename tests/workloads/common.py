"""Shared plumbing for the bundled training workloads: arguments, memory/fault probes, step loop, output."""

import argparse
import ctypes
import json
import os
import resource
import sys
import time

# Steps excluded from steps/s and faults/step: first-touch of weights, optimizer
# state creation and allocator warm-up all happen here.
WARMUP_STEPS = 3


def parse_args(description, default_steps=30, add_args=None):
    """Parse the command line shared by every workload (add_args(parser) adds a workload's own)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=default_steps,
                   help="training steps to run (default %(default)s)")
    p.add_argument("--threads", type=int, default=2,
                   help="intra-op / BLAS threads (default %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="print a final 'OPTMEM_RESULT {json}' line")
    p.add_argument("--batch-scale", type=int, default=1,
                   help="multiply the workload's batch size by this (default %(default)s)")
    if add_args is not None:
        add_args(p)
    args = p.parse_args()
    if args.steps < 1 or args.threads < 1 or args.batch_scale < 1:
        p.error("--steps, --threads and --batch-scale must be at least 1")
    return args


def status_bytes(field):
    """Return a kB field of /proc/self/status (VmRSS, VmHWM, ...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no %s in /proc/self/status" % field)


# With OPTMEM_WORKLOAD_RSS_BY_KIND=1, the resident KiB of each kind of mapping right after
# the imports, so that the result can say what the training-driven RSS is made of.
_by_kind_after_imports = None


def resident_kib_by_kind():
    """Resident KiB of /proc/self/smaps by kind of mapping: "anonymous" (heap, mmap'd and
    stack memory), "code" (executable file mappings), "file read-only" (the read-only
    data of programs and libraries: .rodata, unwind tables) and "file writable"."""
    kinds = dict.fromkeys(("anonymous", "code", "file read-only", "file writable"), 0)
    kind, rest = None, b""
    fd = os.open("/proc/self/smaps", os.O_RDONLY)
    try:
        while True:
            # Small reads: buffers of 4 KiB or more would be requests optmem manages, and
            # requests the training loop never made can make it plan again.
            chunk = os.read(fd, 2048)
            if not chunk:
                break
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                fields = line.split()
                if not fields:
                    continue
                if b"-" in fields[0] and b":" not in fields[0]:  # a mapping's header line
                    path = fields[5] if len(fields) > 5 else b""
                    if not path.startswith(b"/"):
                        kind = "anonymous"
                    elif b"x" in fields[1]:
                        kind = "code"
                    else:
                        kind = "file writable" if b"w" in fields[1] else "file read-only"
                elif fields[0] == b"Rss:":
                    kinds[kind] += int(fields[1])
    finally:
        os.close(fd)
    return kinds


def rss_after_imports():
    """VmRSS in bytes, read right after the imports (see train())."""
    global _by_kind_after_imports
    if os.environ.get("OPTMEM_WORKLOAD_RSS_BY_KIND") == "1":
        _by_kind_after_imports = resident_kib_by_kind()
    return status_bytes("VmRSS")


def minor_faults():
    """Minor page faults of the whole process (all threads) so far; of the training thread
    alone with OPTMEM_WORKLOAD_FAULTS=thread."""
    who = resource.RUSAGE_SELF
    if os.environ.get("OPTMEM_WORKLOAD_FAULTS") == "thread":
        who = resource.RUSAGE_THREAD
    return resource.getrusage(who).ru_minflt


def step_marker():
    """Return optmem_step if explicitly asked for and the library is loaded, else None.

    By default nothing is marked: optmem has to find iterations on its own.
    """
    if os.environ.get("OPTMEM_WORKLOAD_MARK_STEPS") != "1":
        return None
    fn = getattr(ctypes.CDLL(None), "optmem_step", None)
    if fn is None:
        print("note: OPTMEM_WORKLOAD_MARK_STEPS=1 but optmem_step is not loaded",
              file=sys.stderr)
        return None
    fn.restype = None
    fn.argtypes = []
    return fn


def calltime_marker():
    """Return (step, mark) where bench/calltime.c is preloaded: mark() starts its "phase"
    histograms, called before step `step` (CALLTIME_MARK_STEP, default WARMUP_STEPS);
    (None, None) otherwise, and the workload runs as without it."""
    fn = getattr(ctypes.CDLL(None), "calltime_phase_mark", None)
    if fn is None:
        return None, None
    raw = os.environ.get("CALLTIME_MARK_STEP", "")
    try:
        step = int(raw) if raw else WARMUP_STEPS
    except ValueError:
        step = -1
    if step < 0:
        print("error: CALLTIME_MARK_STEP must be a step number >= 0, not %r" % raw,
              file=sys.stderr)
        sys.exit(1)
    fn.restype = None
    fn.argtypes = []
    return step, fn


def train(name, args, rss_after_imports, step_fn, metric="loss", extra=None):
    """Run step_fn(i) -> value (a Python float) for args.steps steps, print and measure.

    rss_after_imports must have been read right after the imports, before any model
    or data was built, so that the difference to VmHWM is what training drove.
    metric names the per-step value ("loss", or "checksum" for inference workloads);
    extra is merged into the result (e.g. model, mode, input size).
    """
    mark = step_marker()
    phase_step, phase_mark = calltime_marker()
    losses = []
    t_steady = flt_steady = None
    for i in range(args.steps):
        if i == WARMUP_STEPS:
            t_steady = time.perf_counter()
            flt_steady = minor_faults()
        if i == phase_step:
            phase_mark()
        loss = float(step_fn(i))
        if mark is not None:
            mark()
        losses.append(loss)
        # repr keeps every bit of the double, so runs can be compared exactly.
        print("step %d %s %r" % (i, metric, loss), flush=True)
    steady = args.steps - WARMUP_STEPS
    if t_steady is not None and steady > 0:
        elapsed = time.perf_counter() - t_steady
        flt_per_step = (minor_faults() - flt_steady) / steady
        steps_per_s = steady / elapsed if elapsed > 0 else None
    else:
        flt_per_step = steps_per_s = None
    # Read right after the last step, before anything is torn down: the steady
    # footprint the allocator kept, which can be far below the peak (pages returned)
    # or equal to it (pages kept for reuse).
    rss_end = status_bytes("VmRSS")
    peak = status_bytes("VmHWM")
    result = {
        "workload": name,
        "steps": args.steps,
        "threads": args.threads,
        "rss_after_imports_bytes": rss_after_imports,
        "peak_rss_bytes": peak,
        "training_peak_bytes": peak - rss_after_imports,
        "rss_end_bytes": rss_end,
        "steady_steps_per_s": steps_per_s,
        "minflt_per_steady_step": flt_per_step,
        "metric": metric,
        "losses": losses,
    }
    if _by_kind_after_imports is not None:
        now = resident_kib_by_kind()
        result["rss_growth_by_kind_bytes"] = {
            k: (now[k] - _by_kind_after_imports[k]) * 1024 for k in now}
    result.update(extra or {})
    if args.json:
        print("OPTMEM_RESULT " + json.dumps(result), flush=True)
    return result
