"""Runs cupti_app (the driver's part: load liboptmem_cupti.so, call InitializeInjection) with
the fake libcupti.so.13 first on the library path, and checks what the injection did.

Scenarios: exports, trace, min_bytes, drops, device_limit, flush_fails, next_record_fails,
enable_fails, quiet, no_report, with_preload. Expected figures are computed here from the records the
scenario makes the fake deliver. Exit status 0 on success.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tracer"))
import report_schema  # noqa: E402

# cupti_activity.h's values, as cuda/cupti_abi.h declares them.
KIND_PINNED, KIND_DEVICE, KIND_MANAGED = 2, 3, 5
RECORDS_PER_BUFFER = 7
DEVICES = 16  # tracer.h: OM_TRACER_DOMAINS, less the host's
ITERATIONS = 12
KIB, MIB = 1024, 1024 * 1024


class CheckError(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise CheckError("%s: got %r, expected %r" % (what, got, want))


class Addresses:
    """Device addresses as a caching allocator hands them out: a freed block's address is
    reused by the next request of its size, so the tracer sees addresses come back."""

    def __init__(self, base):
        self.top = base
        self.free = collections.defaultdict(list)

    def take(self, size):
        if self.free[size]:
            return self.free[size].pop()
        addr = self.top
        self.top += (size + 0xFFFF) & ~0xFFFF
        return addr

    def give(self, addr, size):
        self.free[size].append(addr)


def training_records(iterations=ITERATIONS):
    """A training loop on device 0 (weights, then per iteration: input, two activations,
    a workspace, gradients, one gradient freed only in the next iteration), a temporary on
    device 1 per iteration, small requests, pinned host memory, and an unknown release."""
    recs = []
    spaces = {0: Addresses(0x7F0000000000), 1: Addresses(0x7F4000000000)}

    def alloc(size, pc, device=0, kind=KIND_DEVICE):
        addr = spaces[device].take(size)
        recs.append(("A", kind, addr, size, device, pc))
        return (addr, size, device, kind)

    def release(block):
        addr, size, device, kind = block
        recs.append(("R", kind, addr, size, device, 0x400F00))
        spaces[device].give(addr, size)

    pinned = alloc(8 * MIB, 0x400100, kind=KIND_PINNED)
    alloc(1 * MIB, 0x400200)
    alloc(4 * MIB, 0x400300, kind=KIND_MANAGED)
    alloc(2 * MIB, 0x400400, device=1)
    previous_grad = None
    for _ in range(iterations):
        x = alloc(512 * KIB, 0x401000)
        a1 = alloc(2 * MIB, 0x401100)
        ws = alloc(96 * KIB, 0x401200)
        release(ws)
        tiny = alloc(256, 0x401300)
        release(tiny)
        a2 = alloc(1 * MIB, 0x401400)
        if previous_grad:
            release(previous_grad)
        g2 = alloc(1 * MIB, 0x401500)
        release(a2)
        g1 = alloc(2 * MIB, 0x401600)
        release(a1)
        release(g2)
        release(x)
        t = alloc(3 * MIB, 0x402000, device=1)
        release(t)
        previous_grad = g1
    recs.append(("R", KIND_DEVICE, 0xDEAD0000, 4096, 0, 0x400F00))
    release(pinned)
    return recs


def model(recs, min_bytes):
    """What the tracer must have recorded per device: the injection's rules (device and
    managed memory only; allocations of at least min_bytes) applied to the records."""
    doms = {}
    for op, kind, addr, size, device, pc in recs:
        if kind not in (KIND_DEVICE, KIND_MANAGED) or device >= DEVICES:
            continue
        if op == "A" and size >= min_bytes:
            d = doms.setdefault(device, {"requests": 0, "frees": 0, "live": {}, "live_bytes": 0,
                                         "lower_bound": 0, "sites": collections.Counter()})
            d["requests"] += 1
            d["live"][addr] = size
            d["live_bytes"] += size
            d["lower_bound"] = max(d["lower_bound"], d["live_bytes"])
            d["sites"][pc] += 1
        elif op == "R" and device in doms and addr in doms[device]["live"]:
            d = doms[device]
            d["frees"] += 1
            d["live_bytes"] -= d["live"].pop(addr)
    return doms


def write_records(path, recs, extra=()):
    with open(path, "w") as f:
        f.write("buffer %d\n" % RECORDS_PER_BUFFER)
        for op, kind, addr, size, device, pc in recs:
            f.write("%s %d %x %d %d %x\n" % (op, kind, addr, size, device, pc))
        for line in extra:
            f.write(line + "\n")


def run(args, env_extra, records_path, preload=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTMEM_")}
    env.pop("LD_PRELOAD", None)
    env.pop("FAKE_CUPTI_FAIL", None)
    env["LD_LIBRARY_PATH"] = args.fakelib
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(env_extra)
    proc = subprocess.run([args.app, args.inject, records_path], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if proc.returncode != 0:
        raise CheckError("cupti_app exited with %d:\n%s%s" % (proc.returncode, proc.stdout,
                                                              proc.stderr))
    return proc


def optmem_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("optmem:")]


def stdout_value(proc, prefix):
    for line in proc.stdout.splitlines():
        if line.startswith(prefix):
            return line
    raise CheckError("no line %r in the output:\n%s" % (prefix, proc.stdout))


def load_report(path):
    if not os.path.exists(path):
        raise CheckError("no report at %s" % path)
    with open(path) as f:
        r = json.load(f)
    report_schema.validate(r)
    return report_schema.expand(r)


def check_domains(report, doms):
    expect("domains", report["domains"], ["cpu"] + ["cuda:%d" % d for d in sorted(doms)])
    expect("host managed_requests (nothing interposes malloc)",
           report["counters"]["managed_requests"], 0)
    devices = {d["name"]: d for d in report["device_domains"]}
    for device, want in doms.items():
        name = "cuda:%d" % device
        got = devices[name]
        c = got["counters"]
        expect(name + " managed_requests", c["managed_requests"], want["requests"])
        expect(name + " managed_frees", c["managed_frees"], want["frees"])
        expect(name + " live_blocks", c["live_blocks"], len(want["live"]))
        expect(name + " live_bytes", c["live_bytes"], want["live_bytes"])
        expect(name + " lower_bound_bytes", got["lower_bound_bytes"], want["lower_bound"])
        expect(name + " call_sites", c["call_sites"], len(want["sites"]))
        sites = {}
        for s in got["sites"]:
            expect(name + " site %d depth" % s["id"], len(s["frames"]), 1)
            sites[int(s["frames"][0]["address"], 16)] = s["count"]
        expect(name + " requests by PC", sites, dict(want["sites"]))


def exports(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    return sorted(f[2].split("@")[0] for f in (line.split() for line in out.splitlines())
                  if len(f) == 3 and f[1] in "TWDBVR")


def scenario_exports(args, tmp):
    expect("exported symbols", exports(args.inject), ["InitializeInjection"])
    # The fake implements exactly the entry points the injection library resolves.
    abi_h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cuda",
                         "cupti_abi.h")
    with open(abi_h) as f:
        declared = sorted(set(re.findall(r"\bom_(cupti[A-Z]\w*)_fn\b", f.read())))
    fake = [s for s in exports(os.path.join(args.fakelib, "libcupti.so.13"))
            if s.startswith("cupti")]
    expect("CUPTI entry points of the fake", fake, declared)
    dyn = subprocess.run(["readelf", "-d", args.inject], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    for lib in ("libcupti", "libcuda", "libcudart"):
        if lib in dyn:
            raise CheckError("linked against %s:\n%s" % (lib, dyn))


def traced(args, tmp, env_extra, extra=(), min_bytes=4096, flush_fails=False, more=()):
    recs = training_records() + list(more)
    if len(recs) % RECORDS_PER_BUFFER == 0:
        raise CheckError("the records fill whole buffers: the exit flush would go untested")
    path = os.path.join(tmp, "records.txt")
    write_records(path, recs, extra)
    env = dict({"OPTMEM_REPORT": os.path.join(tmp, "report.%p.json")}, **env_extra)
    proc = run(args, env, path)
    expect("InitializeInjection", stdout_value(proc, "InitializeInjection"),
           "InitializeInjection returned 1")
    expect("records", stdout_value(proc, "records:"),
           "records: %d written by CUPTI, 0 refused" % len(recs))
    # Full buffers go by the worker; the partial one only by the flush at exit.
    full = len(recs) // RECORDS_PER_BUFFER
    flushed = 0 if flush_fails else 1
    expect("fake buffers", stdout_value(proc, "fake:"),
           "fake: %d buffers requested, %d completed by the worker, %d by a flush, "
           "%d flushes, %d records written" % (full + 1, full, flushed, flushed, len(recs)))
    doms = model(recs[:full * RECORDS_PER_BUFFER] if flush_fails else recs, min_bytes)
    names = [n for n in os.listdir(tmp) if n.startswith("report.")]
    expect("reports written", names, ["report.%d.json" % app_pid(proc)])
    r = load_report(os.path.join(tmp, names[0]))
    check_domains(r, doms)
    return proc, r, doms


def app_pid(proc):
    return int(stdout_value(proc, "pid ").split()[1])


def scenario_trace(args, tmp):
    proc, r, doms = traced(args, tmp, {})
    expect("optmem lines", optmem_lines(proc), [])
    expect("configuration.mode", r["configuration"]["mode"], "trace")
    expect("configuration.stack_depth", r["configuration"]["stack_depth"], 1)
    # One more iteration adds one period of device 0's requests.
    period = (model(training_records(ITERATIONS + 1), 4096)[0]["requests"] -
              model(training_records(), 4096)[0]["requests"])
    cuda0 = r["device_domains"][0]
    expect("cuda:0 iterations found", cuda0["iterations"]["found"], True)
    expect("cuda:0 period_requests", cuda0["iterations"]["period_requests"], period)


def scenario_min_bytes(args, tmp):
    proc, r, doms = traced(args, tmp, {"OPTMEM_MIN_BYTES": "1M"}, min_bytes=MIB)
    expect("optmem lines", optmem_lines(proc), [])
    expect("configuration.min_bytes", r["configuration"]["min_bytes"], MIB)


def scenario_drops(args, tmp):
    proc, r, doms = traced(args, tmp, {}, extra=["D 3", "D 2"])
    lines = optmem_lines(proc)
    expect("optmem lines", len(lines), 1)
    if "dropped 5 " not in lines[0]:
        raise CheckError("the line does not say 5 records were dropped: %s" % lines[0])


def scenario_device_limit(args, tmp):
    big = [("A", KIND_DEVICE, 0x7F8000000000, 2 * MIB, DEVICES, 0x401700),
           ("R", KIND_DEVICE, 0x7F8000000000, 2 * MIB, DEVICES, 0x400F00)]
    proc, r, doms = traced(args, tmp, {}, more=big)
    lines = optmem_lines(proc)
    expect("optmem lines", len(lines), 1)
    if "device %d " % DEVICES not in lines[0]:
        raise CheckError("the line does not name device %d: %s" % (DEVICES, lines[0]))


def scenario_flush_fails(args, tmp):
    proc, r, doms = traced(args, tmp, {"FAKE_CUPTI_FAIL": "cuptiActivityFlushAll"},
                           flush_fails=True)
    lines = optmem_lines(proc)
    expect("optmem lines", len(lines), 1)
    if "cuptiActivityFlushAll" not in lines[0]:
        raise CheckError("the line does not name cuptiActivityFlushAll: %s" % lines[0])


def scenario_next_record_fails(args, tmp):
    recs = training_records()
    path = os.path.join(tmp, "records.txt")
    write_records(path, recs)
    proc = run(args, {"OPTMEM_REPORT": os.path.join(tmp, "report.json"),
                      "FAKE_CUPTI_FAIL": "cuptiActivityGetNextRecord"}, path)
    lines = optmem_lines(proc)
    expect("optmem lines", len(lines), 1)
    if "cuptiActivityGetNextRecord" not in lines[0]:
        raise CheckError("the line does not name cuptiActivityGetNextRecord: %s" % lines[0])
    # Nothing was recorded: a process that made no managed request writes no report.
    if os.path.exists(os.path.join(tmp, "report.json")):
        raise CheckError("a report from a process that recorded nothing")


def declined(args, tmp, env_extra, want_lines, preload=None):
    recs = training_records()
    path = os.path.join(tmp, "records.txt")
    write_records(path, recs)
    proc = run(args, env_extra, path, preload=preload)
    expect("InitializeInjection", stdout_value(proc, "InitializeInjection"),
           "InitializeInjection returned 0")
    expect("records", stdout_value(proc, "records:"),
           "records: 0 written by CUPTI, %d refused" % len(recs))
    lines = optmem_lines(proc)
    expect("optmem lines", len(lines), len(want_lines))
    for line, want in zip(lines, want_lines):
        if want not in line:
            raise CheckError("expected %r in the line: %s" % (want, line))
    return proc


def scenario_enable_fails(args, tmp):
    report = os.path.join(tmp, "report.json")
    declined(args, tmp, {"OPTMEM_REPORT": report, "FAKE_CUPTI_FAIL": "cuptiActivityEnable"},
             ["cuptiActivityEnable"])
    if os.path.exists(report):
        raise CheckError("a report was written though nothing was recorded")


def scenario_quiet(args, tmp):
    declined(args, tmp, {"OPTMEM_REPORT": os.path.join(tmp, "report.json"),
                         "OPTMEM_LOG": "quiet", "FAKE_CUPTI_FAIL": "cuptiActivityEnable"}, [])


def scenario_no_report(args, tmp):
    proc = declined(args, tmp, {}, ["OPTMEM_REPORT"])
    expect("libcupti", stdout_value(proc, "libcupti"), "libcupti not loaded")


def scenario_with_preload(args, tmp):
    if not args.preload:
        raise CheckError("with_preload needs --preload")
    report = os.path.join(tmp, "report.json")
    proc = declined(args, tmp, {"OPTMEM_REPORT": report, "OPTMEM_MODE": "trace"},
                    ["liboptmem.so is loaded too"], preload=args.preload)
    expect("libcupti", stdout_value(proc, "libcupti"), "libcupti not loaded")
    # The report is liboptmem.so's own: the host only, written once.
    r = load_report(report)
    expect("domains", r["domains"], ["cpu"])


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--app", required=True)
    ap.add_argument("--inject", required=True, help="liboptmem_cupti.so")
    ap.add_argument("--fakelib", required=True, help="directory of the fake libcupti.so.13")
    ap.add_argument("--preload", help="liboptmem.so (with_preload)")
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="optmem-cupti-") as tmp:
        try:
            SCENARIOS[args.scenario](args, tmp)
        except (CheckError, report_schema.SchemaError) as e:
            print("FAIL: %s" % e)
            return 1
    print("ok: %s" % args.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main())
