"""Checks of `optmem report --format memory-viz` (tests/report/CMakeLists.txt runs one per test).

Usage: check_memviz.py --optmem CLI [--preload LIB] SUBCOMMAND [ARGS...]
Subcommands: structure (the pickle's dicts and its trace against the report's lifetimes),
torch (torch 1.13's torch.cuda._memory_viz reads its segments), roundtrip (optmem's own
snapshot reader gives the sample's buffers and peak back), domains PROGRAM (a host domain
without offsets and a device domain, from tests/tracer/domains_report.c), symbolized PROGRAM
(tests/report/sym_target.c run under the preload library: frames with file and line),
snapshots DIR (the bundled real PyTorch snapshots exported and read back), errors."""
import argparse
import contextlib
import io
import json
import os
import pickle
import pty
import re
import shutil
import subprocess
import sys
import tempfile

import checks
from checks import CheckError, expect

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "fixtures", "train_loop.json")
DRIFT = os.path.join(HERE, "fixtures", "train_drift.json")
BASE = 0x7f0000000000  # the segment's address (tools/report_memviz.c)
ROUND = 512  # PyTorch's caching allocator rounds requests up to this (tools/snapshot.h)


def cli(args, argv, status=0):
    return checks.cli(args, argv, status=status, timeout=120)


def export(args, tmp, report, name, extra=()):
    out = os.path.join(tmp, name)
    cli(args, ["report", report, "--format", "memory-viz", "-o", out, "--no-symbolize"] +
        list(extra))
    with open(out, "rb") as f:
        return out, pickle.load(f)


def section(report, domain):
    if domain == "cpu":
        return report
    return next(d for d in report["device_domains"] if d["name"] == domain)


def records(sec):
    """Every lifetime the report holds, as the export orders them: the resident blocks (born
    before the sample, live at its start; no times) by birth, then the sample's records."""
    resident = sorted(sec.get("resident", {}).get("blocks", []), key=lambda b: b[2])
    return [b + [None, None, None] for b in resident] + \
        [r for r in sec["sample"]["lifetimes"] if r]


def check_snapshot(snap, sec, device, plain_frames=True):
    """The pickle against the report's sample: one alloc per record, a free per ended one, the
    segment tiled by its blocks, and a trace that replays without overlap."""
    recs = records(sec)
    expect(sorted(snap) == ["allocator_settings", "device_traces", "optmem", "segments"],
           "keys %s" % sorted(snap))
    # What the export holds, said in it.
    meta, sm = snap["optmem"], sec["sample"]
    nres = len(sec.get("resident", {}).get("blocks", []))
    held_all = sm["first_request"] <= sec["timeline"]["first_request"]
    expect(meta["lifetimes"] == ("all" if held_all else "sample") and
           meta["first_request"] == sm["first_request"] and
           meta["end_request"] == sm["end_request"] and
           meta["sample_lifetimes"] == len(recs) - nres and
           meta["resident_lifetimes"] == nres, "metadata %r" % meta)
    expect(snap["allocator_settings"] == {}, "allocator_settings %r" % snap["allocator_settings"])
    traces = snap["device_traces"]
    expect(len(traces) == device + 1 and all(t == [] for t in traces[:device]),
           "%d traces for device %d" % (len(traces), device))
    events = traces[device]
    segs = snap["segments"]
    expect(len(segs) == 1, "%d segments" % len(segs))
    seg = segs[0]
    for key, value in (("device", device), ("address", BASE), ("stream", 0),
                       ("segment_type", "large")):
        expect(seg[key] == value, "segment %s = %r, not %r" % (key, seg[key], value))
    # The blocks tile the segment from its address.
    at = BASE
    for b in seg["blocks"]:
        expect(b["address"] == at, "block at %#x, expected %#x" % (b["address"], at))
        expect(b["state"] in ("active_allocated", "inactive"), "state %r" % b["state"])
        at += b["size"]
    expect(at == BASE + seg["total_size"], "blocks end at %#x, segment at %#x" %
           (at, BASE + seg["total_size"]))
    active = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
    live = [r for r in recs if r[3] is None]
    expect(len(active) == len(live), "%d active blocks, %d live records" %
           (len(active), len(live)))
    expect(seg["allocated_size"] == sum(r[1] for r in live), "allocated_size %d" %
           seg["allocated_size"])
    for b in active:
        expect(b["history"][0]["real_size"] == b["requested_size"] and
               b["history"][0]["frames"] == b["frames"] and b["frames"],
               "block %#x: history %r" % (b["address"], b["history"]))

    actions = [e["action"] for e in events]
    expect(actions[0] == "segment_alloc" and events[0]["size"] == seg["total_size"],
           "the trace opens with %r" % events[0])
    allocs = [e for e in events if e["action"] == "alloc"]
    ended = [r for r in recs if r[3] is not None]
    expect(len(allocs) == len(recs), "%d alloc events for %d records" % (len(allocs), len(recs)))
    for action in ("free_requested", "free_completed"):
        expect(actions.count(action) == len(ended), "%d %s for %d ended records" %
               (actions.count(action), action, len(ended)))
    # Allocs come in request order, with the records' sizes, sites' frames and offsets.
    sites = sec["sites"]
    for e, r in zip(allocs, recs):
        expect(e["size"] == r[1] and e["stream"] == 0, "alloc %r for record %r" % (e, r))
        if r[4] is not None:
            expect(e["time_us"] == r[4] // 1000,
                   "alloc at %d us for record %r" % (e["time_us"], r))
        if r[6] is not None:
            expect(e["addr"] == BASE + r[6], "alloc at %#x, record at offset %d" %
                   (e["addr"], r[6]))
        frames = sites[r[0]]["frames"]
        if not plain_frames:  # symbolized: inlined frames expanded, checked by the caller
            continue
        expect(len(e["frames"]) == len(frames), "site %d: %d frames, not %d" %
               (r[0], len(e["frames"]), len(frames)))
        for got, want in zip(e["frames"], frames):
            name = want["function"] or "%s+%s" % (os.path.basename(want["module"] or ""),
                                                  want["offset"])
            expect(got["name"] == name and got["line"] == 0 and
                   got["filename"] == (want["module"] or "??"),
                   "frame %r for %r" % (got, want))
    # Replayed, no two live blocks share a byte, each free ends the block at its address.
    open_ = {}
    for e in events[1:]:
        if e["action"] == "alloc":
            lo, hi = e["addr"], e["addr"] + e["size"]
            expect(BASE <= lo and hi <= BASE + seg["total_size"], "alloc %r outside" % e)
            for a, s in open_.items():
                expect(hi <= a or a + s <= lo, "alloc %r overlaps a block at %#x" % (e, a))
            open_[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            expect(open_.pop(e["addr"], None) == e["size"], "free %r of no such block" % e)
        else:
            expect(e["action"] == "free_requested" and e["addr"] in open_, "event %r" % e)
    expect(sorted(open_.items()) == sorted((b["address"], b["size"]) for b in active),
           "blocks open at the trace's end are not the segment's active blocks")
    return seg, events


def structure(args, rest, tmp):
    report = checks.load_report(LOOP)
    _, snap = export(args, tmp, LOOP, "loop.pickle")
    check_snapshot(snap, report, 0)


def torch(args, rest, tmp):
    from torch.cuda import _memory_viz as mv  # Debian's python3-torch 1.13
    report = checks.load_report(LOOP)
    _, loop = export(args, tmp, LOOP, "loop.pickle")
    _, drift = export(args, tmp, DRIFT, "drift.pickle")
    seg = loop["segments"][0]
    live = [r for r in records(report) if r[3] is None]
    stats = mv.stats(loop["segments"])  # asserts that the blocks add up to each segment
    expect(stats["segments"] == 1 and stats["total_size"].value == seg["total_size"],
           "stats %r" % stats)
    expect(stats["active_allocated"].value == sum(r[1] for r in live), "stats %r" % stats)
    lines = {}
    for fn in (mv.segments, mv.memory):
        out = fn(loop["segments"], format_flamegraph=lambda text: text)
        lines[fn.__name__] = out.splitlines()
        # Folded stacks: one line per block, outermost frame first, weighed by its size.
        total = sum(int(line.rsplit(" ", 1)[1]) for line in lines[fn.__name__])
        expect(total == seg["total_size"], "%s: %d bytes in %r" % (fn.__name__, total, out))
    for r in live:
        site = report["sites"][r[0]]["frames"][0]["function"]
        want = "stream_0;seg_%d;active_allocated;" % BASE
        expect(any(line.startswith(want) and line.endswith(":0:%s %d" % (site, r[1]))
                   for line in lines["segments"]),
               "no segments line of the live block of %s: %r" % (site, lines["segments"]))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        out = mv.compare(loop["segments"], drift["segments"], format_flamegraph=lambda t: t)
    # Both segments start at one address; they differ by size, so each is only on its side.
    expect("only_before = [%d]" % BASE in printed.getvalue(), "compare: %r" % printed.getvalue())
    sizes = {side: sum(int(line.rsplit(" ", 1)[1]) for line in out.splitlines()
                       if line.startswith(side + ";"))
             for side in ("only_before", "only_after")}
    expect(sizes == {"only_before": seg["total_size"],
                     "only_after": drift["segments"][0]["total_size"]}, "compare: %r" % sizes)


def max_live(recs):
    """The most bytes live at once, sizes rounded up as the snapshot reader rounds them."""
    def rounded(n):
        return ROUND if n < ROUND else (n + ROUND - 1) // ROUND * ROUND
    best = 0
    for r in recs:
        t = r[2]
        live = sum(rounded(x[1]) for x in recs if x[2] <= t and (x[3] is None or x[3] > t))
        best = max(best, live)
    return best


def roundtrip_one(args, tmp, path, domain, name):
    sec = section(checks.load_report(path), domain)
    out, snap = export(args, tmp, path, name, ["--domain", domain])
    shown, _ = cli(args, ["report", out, "--format", "json"])
    proc = json.loads(shown)["processes"][0]
    recs = records(sec)
    expect(proc["managed_requests"] == len(recs), "%s read back: %d buffers, report %d" %
           (name, proc["managed_requests"], len(recs)))
    expect(proc["lower_bound_bytes"] == max_live(recs), "%s read back: lower bound %d, the "
           "sample's %d" % (name, proc["lower_bound_bytes"], max_live(recs)))
    expect(proc["peak_live_bytes"] == snap["segments"][0]["total_size"],
           "%s read back: peak %d, segment %d" % (name, proc["peak_live_bytes"],
                                                  snap["segments"][0]["total_size"]))
    return snap


def roundtrip(args, rest, tmp):
    roundtrip_one(args, tmp, LOOP, "cpu", "loop.pickle")
    roundtrip_one(args, tmp, DRIFT, "cpu", "drift.pickle")


def domains(args, rest, tmp):
    path = os.path.join(tmp, "domains.json")
    subprocess.run([rest[0], path], stdout=subprocess.DEVNULL, check=True, timeout=60)
    report = checks.load_report(path)
    for domain, device in (("cpu", 0), ("cuda:0", 0)):
        snap = roundtrip_one(args, tmp, path, domain, domain.replace(":", "_") + ".pickle")
        check_snapshot(snap, section(report, domain), device)
    # The host records no offsets: every block was placed, as tightly as the sample allows.
    expect(all(r[6] is None for r in records(report)), "the host's records have offsets")
    # A device numbered 2: the viewers index device_traces by device, so two empty lists
    # come before its own.
    report["device_domains"][0]["name"] = "cuda:2"
    report["domains"] = ["cpu", "cuda:2"]
    renamed = os.path.join(tmp, "cuda2.json")
    with open(renamed, "w") as f:
        json.dump(report, f)
    out, snap = export(args, tmp, renamed, "cuda2.pickle", ["--domain", "cuda:2"])
    check_snapshot(snap, section(report, "cuda:2"), 2)
    shown = json.loads(cli(args, ["report", out, "--format", "json"])[0])
    expect(shown["domain"] == "cuda:2", "read back as %s" % shown["domain"])


def symbolized(args, rest, tmp):
    lines = {}
    with open(os.path.join(HERE, "sym_target.c")) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"LINE:(\w+)", text)
            if m:
                lines[m.group(1)] = no
    path = os.path.join(tmp, "sym.json")
    env = dict(os.environ, LD_PRELOAD=args.preload, OPTMEM_MODE="trace", OPTMEM_REPORT=path)
    subprocess.run([rest[0]], env=env, check=True, timeout=60)
    report = checks.load_report(path)
    out = os.path.join(tmp, "sym.pickle")
    cli(args, ["report", path, "--format", "memory-viz", "-o", out])
    with open(out, "rb") as f:
        snap = pickle.load(f)
    _, events = check_snapshot(snap, report, 0, plain_frames=False)
    want = [("inner_alloc", "inner"), ("outer_site", "outer"), ("main", "main")]
    for e in (e for e in events if e["action"] == "alloc"):
        got = [(f["name"], os.path.basename(f["filename"]), f["line"]) for f in e["frames"][:3]]
        expect(got == [(name, "sym_target.c", lines[mark]) for name, mark in want],
               "alloc frames %r" % got)


def summary(args, path):
    out, _ = cli(args, ["report", path, "--format", "json"])
    p = json.loads(out)["processes"][0]
    return p["managed_requests"], p["lower_bound_bytes"], p["peak_live_bytes"]


def snapshots(args, rest, tmp):
    """A PyTorch snapshot read as a report and written back as one: the same buffers and
    lower bound, Python frames kept, and segments that torch 1.13's stats accepts."""
    from torch.cuda import _memory_viz as mv
    names = sorted(n for n in os.listdir(rest[0]) if n.endswith(".pickle"))
    expect(len(names) == 5, "%d snapshots in %s" % (len(names), rest[0]))
    for name in names:
        src = os.path.join(rest[0], name)
        out = os.path.join(tmp, name)
        cli(args, ["report", src, "--format", "memory-viz", "-o", out])
        with open(out, "rb") as f:
            snap = pickle.load(f)
        before, after = summary(args, src), summary(args, out)
        seg = snap["segments"][0]
        expect(before[:2] == after[:2] and after[2] == seg["total_size"],
               "%s: (buffers, lower bound, peak) %s, read back %s" % (name, before, after))
        allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
        expect(len(allocs) == before[0] and
               any(f["filename"].endswith(".py") and f["line"] > 0
                   for e in allocs for f in e["frames"]),
               "%s: %d allocs, or no Python frame" % (name, len(allocs)))
        stats = mv.stats(snap["segments"])
        expect(stats["total_size"].value == seg["total_size"], "%s: stats %r" % (name, stats))


def errors(args, rest, tmp):
    out = os.path.join(tmp, "x.pickle")
    _, err = cli(args, ["report", LOOP, DRIFT, "--format", "memory-viz", "-o", out], status=2)
    expect(re.fullmatch(r"optmem report: --format memory-viz takes one report, not 2\n", err),
           "two reports: %r" % err)
    _, err = cli(args, ["report", LOOP, "--format", "memory-viz", "-o", out, "--domain",
                        "cuda:3"], status=1)
    expect("no memory domain 'cuda:3'" in err and not os.path.exists(out), "domain: %r" % err)
    text, _ = cli(args, ["report", "--help"])
    expect("memory-viz" in text, "optmem report --help lacks memory-viz")
    # The pickle is binary: not onto a terminal, but through a pipe it is the same file.
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([args.optmem, "report", LOOP, "--format", "memory-viz"],
                              stdout=slave, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    expect(proc.returncode == 2 and b"give -o FILE" in proc.stderr,
           "onto a terminal: exit %d, %r" % (proc.returncode, proc.stderr))
    piped = subprocess.run([args.optmem, "report", LOOP, "--format", "memory-viz"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60).stdout
    cli(args, ["report", LOOP, "--format", "memory-viz", "-o", out])
    with open(out, "rb") as f:
        expect(f.read() == piped, "standard output and -o differ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optmem", required=True)
    ap.add_argument("--preload")
    ap.add_argument("command")
    ap.add_argument("rest", nargs="*")
    args = ap.parse_args()
    commands = {"structure": structure, "torch": torch, "roundtrip": roundtrip,
                "domains": domains, "symbolized": symbolized, "snapshots": snapshots, "errors": errors}
    tmp = tempfile.mkdtemp(prefix="optmem-memviz-test.")
    try:
        commands[args.command](args, args.rest, tmp)
    except (CheckError, subprocess.SubprocessError, OSError, KeyError, ValueError,
            StopIteration, pickle.UnpicklingError) as e:
        print("FAIL %s: %s" % (args.command, e), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok %s" % args.command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
