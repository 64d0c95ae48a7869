"""Checks of PyTorch memory snapshots as input to `optmem plan` and `optmem report`.

Usage: check_snapshots.py --optmem CLI [--snapshots DIR] SUBCOMMAND
  synthetic  snapshots from make_snapshot.py: buffers, lower bound and native peak per
             device and stream as the generator counted them, the plan checked, -o files
  bundled    the real snapshots of ../shared/bench/snapshots: native peak and lower bound
             as their README gives them, plan <= 1.01 x lower bound and below native
  corrupt    broken and hostile files: exit 1 with one line naming the problem
  report     `optmem report` of a snapshot in every format
"""
import argparse
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "report"))
import checks  # noqa: E402
from checks import CheckError, expect  # noqa: E402
GIB = float(1 << 30)


def cli(args, argv, status=0):
    return checks.cli(args, argv, status=status, timeout=120)


def parse_plan(out):
    """{(device, stream): {buffers, native, lb, peak}} from `optmem plan SNAPSHOT`."""
    groups, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"device (-?\d+) stream (-?\d+):$", line)
        if m:
            cur = groups.setdefault((int(m.group(1)), int(m.group(2))), {})
            continue
        m = re.match(r"  (buffers|native peak|lower bound|plan peak): +(\d+)", line)
        if m and cur is not None:
            cur[{"buffers": "buffers", "native peak": "native", "lower bound": "lb",
                 "plan peak": "peak"}[m.group(1)]] = int(m.group(2))
    return groups


def make(tmp, name, *opts):
    path = os.path.join(tmp, name + ".pickle")
    truth = os.path.join(tmp, name + ".json")
    subprocess.run([sys.executable, os.path.join(HERE, "make_snapshot.py"), path,
                    "--truth", truth] + list(opts), check=True)
    with open(truth) as f:
        t = json.load(f)
    return path, t


def synthetic(args, tmp):
    cases = [("dict", "4", "1", "1"), ("dict", "2", "2", "3"), ("dict", "5", "1", "2"),
             ("legacy", "4", "2", "2"), ("legacy", "2", "1", "1")]
    for seed in (1, 2, 3):
        for fmt, proto, devices, streams in cases:
            name = "s%d_%s_p%s_d%s_s%s" % (seed, fmt, proto, devices, streams)
            path, t = make(tmp, name, "--seed", str(seed), "--format", fmt, "--protocol",
                           proto, "--devices", devices, "--streams", streams)
            truth = t["streams"]
            out_csv = os.path.join(tmp, name + ".csv")
            out, _ = cli(args, ["plan", path, "--budget-ms", "200", "-o", out_csv])
            groups = parse_plan(out)
            expect(len(groups) == len(truth), "%s: %d groups, generator made %d" %
                   (name, len(groups), len(truth)))
            for t in truth:
                key = (t["device"], t["stream"])
                g = groups.get(key)
                expect(g is not None, "%s: device %d stream %d missing" % ((name,) + key))
                for mine, theirs in (("buffers", "buffers"), ("lb", "lower_bound"),
                                     ("native", "native_peak")):
                    expect(g[mine] == t[theirs], "%s device %d stream %d: %s %d, generator %d"
                           % (name, key[0], key[1], mine, g[mine], t[theirs]))
                expect(g["lb"] <= g["peak"], "%s: plan below the lower bound" % name)
                # The lifetimes written back plan to the same lower bound.
                csv = out_csv if len(truth) == 1 else os.path.join(
                    tmp, "%s.d%d.s%d.csv" % (name, key[0], key[1]))
                with open(csv) as f:
                    rows = f.read().splitlines()
                expect(len(rows) == g["buffers"] + 1, "%s: %d rows" % (csv, len(rows)))
                if g["buffers"]:
                    back, _ = cli(args, ["plan", csv, "--budget-ms", "50"])
                    m = re.search(r"lower bound: (\d+)", back)
                    expect(m and int(m.group(1)) == g["lb"], "%s: lower bound %s read back"
                           % (csv, m and m.group(1)))
    # Detected by content, not by name.
    path, truth = make(tmp, "noext", "--seed", "9")
    os.rename(path, os.path.join(tmp, "noext.csv"))
    out, _ = cli(args, ["plan", os.path.join(tmp, "noext.csv"), "--budget-ms", "50"])
    expect(parse_plan(out)[(0, 0)]["lb"] == truth["streams"][0]["lower_bound"],
           "snapshot named .csv")


def readme_figures(shared):
    """{file: (native GiB, lower bound GiB)} from the bundled snapshots' README."""
    figs = {}
    with open(os.path.join(shared, "README.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 6 and cells[1].endswith(".pickle"):
                figs[cells[1]] = (float(cells[4]), float(cells[5]))
    return figs


def bundled(args, tmp):
    figs = readme_figures(args.snapshots)
    expect(len(figs) == 5, "README of %s lists %d snapshots" % (args.snapshots, len(figs)))
    for name, (native_gib, lb_gib) in sorted(figs.items()):
        out, _ = cli(args, ["plan", os.path.join(args.snapshots, name), "--budget-ms", "2000"])
        groups = parse_plan(out)
        expect(len(groups) == 1, "%s: %d groups" % (name, len(groups)))
        g = list(groups.values())[0]
        print("%s: native %.3f lower bound %.3f plan %.3f GiB" %
              (name, g["native"] / GIB, g["lb"] / GIB, g["peak"] / GIB))
        expect(abs(g["native"] / GIB - native_gib) < 0.0006,
               "%s: native %.4f GiB, README %.3f" % (name, g["native"] / GIB, native_gib))
        expect(abs(g["lb"] / GIB - lb_gib) < 0.0006,
               "%s: lower bound %.4f GiB, README %.3f" % (name, g["lb"] / GIB, lb_gib))
        expect(g["peak"] <= 1.01 * g["lb"], "%s: plan %d > 1.01 x LB %d" %
               (name, g["peak"], g["lb"]))
        expect(g["peak"] < g["native"], "%s: plan %d not below native %d" %
               (name, g["peak"], g["native"]))


def corrupt_cases():
    good = pickle.dumps({"segments": [], "device_traces": [[{
        "action": "alloc", "addr": 4096, "size": 1000, "stream": 0, "frames": []}]]}, protocol=4)
    ev = {"action": "alloc", "addr": 1, "size": 512, "stream": 0}
    cases = [
        ("empty", b"\x80", "truncated"),
        ("truncated_half", good[:len(good) // 2], "truncated"),
        ("truncated_no_stop", good[:-1], "truncated"),
        ("global", pickle.dumps({"segments": [], "x": __import__("collections").OrderedDict()},
                                protocol=2), "GLOBAL"),
        ("stack_global", pickle.dumps({"segments": [], "x": __import__("fractions").Fraction(1)},
                                      protocol=4), "STACK_GLOBAL"),
        ("set", pickle.dumps({"segments": [], "x": {1, 2}}, protocol=4), "EMPTY_SET"),
        ("bytes", pickle.dumps({"segments": [], "x": b"ab"}, protocol=4), "SHORT_BINBYTES"),
        ("huge_string", b"\x80\x04X\xff\xff\xff\xff" + b"a" * 16 + b".", "truncated"),
        ("huge_string8", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"a.", "truncated"),
        ("huge_frame", b"\x80\x04\x95" + struct.pack("<Q", 1 << 40) + b"}.", "FRAME"),
        ("huge_long", b"\x80\x04\x8a\xff" + b"\x01" * 255 + b".", "64 bits"),
        ("memo_unset", b"\x80\x04j\x00\x00\x00\x10.", "memo"),
        ("memo_far", b"\x80\x04}r\x00\x00\x00\x7f.", "memo"),
        ("deep_marks", b"\x80\x04" + b"(" * 5000 + b".", "MARK"),
        ("setitems_list", b"\x80\x04](K\x01K\x02u.", "list"),
        ("append_dict", b"\x80\x04}K\x01a.", "dict"),
        ("list_key", b"\x80\x04}]K\x01s.", "key"),
        ("bad_utf8", b"\x80\x04\x8c\x02\xff\xfe.", "UTF-8"),
        ("two_values", b"\x80\x04}}.", "STOP"),
        ("protocol_9", b"\x80\x09}.", "protocol"),
        ("not_snapshot", pickle.dumps(5, protocol=4), "not a PyTorch memory snapshot"),
        ("no_segments", pickle.dumps({"device_traces": []}, protocol=4), "segments"),
        ("segments_int", pickle.dumps({"segments": 5}, protocol=4), "segments"),
        ("size_str", pickle.dumps({"segments": [], "device_traces": [[dict(ev, size="x")]]},
                                  protocol=4), "size"),
        ("size_negative", pickle.dumps({"segments": [], "device_traces": [[dict(ev, size=-5)]]},
                                       protocol=4), "size"),
        ("size_huge", pickle.dumps({"segments": [], "device_traces": [[dict(ev, size=1 << 62)]]},
                                   protocol=4), "size"),
        ("addr_missing", pickle.dumps({"segments": [], "device_traces": [[{
            "action": "alloc", "size": 512}]]}, protocol=4), "addr"),
        ("frames_int", pickle.dumps({"segments": [], "device_traces": [[dict(ev, frames=3)]]},
                                    protocol=4), "frames"),
        ("frame_bad", pickle.dumps({"segments": [], "device_traces": [[dict(
            ev, frames=[{"filename": 1, "line": 2, "name": "x"}])]]}, protocol=4), "frames"),
        ("trace_dict", pickle.dumps({"segments": [], "device_traces": [{}]}, protocol=4),
         "device_traces"),
        ("block_no_state", pickle.dumps({"segments": [{"device": 0, "address": 0,
                                                       "total_size": 1024,
                                                       "blocks": [{"size": 1024}]}]},
                                        protocol=4), "state"),
        ("device_negative", pickle.dumps({"segments": [{"device": -1, "address": 0,
                                                        "total_size": 1024, "blocks": []}]},
                                         protocol=4), "device"),
    ]
    return cases


def corrupt(args, tmp):
    for name, data, needle in corrupt_cases():
        path = os.path.join(tmp, name + ".pickle")
        with open(path, "wb") as f:
            f.write(data)
        for cmd in (["plan", path], ["report", path]):
            _, err = cli(args, cmd, status=1)
            lines = err.strip().splitlines()
            expect(len(lines) == 1, "%s %s: %d lines on stderr:\n%s" %
                   (cmd[0], name, len(lines), err))
            expect(path in lines[0] and needle.lower() in lines[0].lower(),
                   "%s %s: '%s' does not name the file and '%s'" %
                   (cmd[0], name, lines[0], needle))


def report(args, tmp):
    path, truth = make(tmp, "rep", "--seed", "5", "--devices", "2", "--streams", "2")
    for dev in truth["devices"]:
        domain = "cuda:%d" % dev["device"]
        out, _ = cli(args, ["report", path, "--format", "json", "--domain", domain])
        j = json.loads(out)
        expect(j["domain"] == domain, "json shows domain %s, not %s" % (j["domain"], domain))
        tot = j["totals"]
        expect(tot["lower_bound_bytes"] == dev["lower_bound"], "%s: lower bound %d, generator %d"
               % (domain, tot["lower_bound_bytes"], dev["lower_bound"]))
        native = sum(s["native_peak"] for s in truth["streams"] if s["device"] == dev["device"])
        expect(tot["peak_live_bytes"] == native, "%s: peak live %d, streams' native peaks %d"
               % (domain, tot["peak_live_bytes"], native))
        # Sites are the Python frames (file, line, name) when the stack has any.
        expect(j["peak_sites"], "%s: no site at the peak" % domain)
        for site in j["peak_sites"]:
            files = [f["file"] or "" for f in site["frames"]]
            py = [f for f in files if f.endswith(".py")]
            expect(not py or len(py) == len(files), "%s: C++ frames next to Python ones: %s"
                   % (domain, files))
            expect(all(f["line"] is not None for f in site["frames"] if f["file"]),
                   "%s: a frame without its line" % domain)
            expect(not any("CachingAllocator" in (f["function"] or "") for f in site["frames"]),
                   "%s: the allocator's frames shown: %s" % (domain, site["frames"]))
    text, _ = cli(args, ["report", path])
    expect("memory domain cuda:0" in text, "the default domain is not cuda:0:\n" + text)
    expect(re.search(r"/work/(model|train|optim)\.py:\d+", text), "no file:line in:\n" + text)
    for fmt in ("chrome", "folded", "svg", "html"):
        out, _ = cli(args, ["report", path, "--format", fmt, "--domain", "cuda:1"])
        expect(out.strip(), "report --format %s printed nothing" % fmt)
    chrome = json.loads(cli(args, ["report", path, "--format", "chrome"])[0])
    expect(chrome, "chrome trace is empty")
    _, err = cli(args, ["report", path, "--domain", "cuda:5"], status=1)
    expect("cuda:0" in err and "cuda:1" in err, "the domains are not listed: " + err)
    # Mixed with a report, the domain must be named.
    lone = os.path.join(tmp, "lone.json")
    with open(lone, "w") as f:
        f.write("{}")
    _, err = cli(args, ["report", path, lone], status=2)
    expect("--domain" in err, "mixing a snapshot and a report: " + err)
    # A legacy snapshot (a list of segments) reads as well.
    legacy, _ = make(tmp, "rep_legacy", "--seed", "6", "--format", "legacy")
    j = json.loads(cli(args, ["report", legacy, "--format", "json"])[0])
    frames = [f["file"] for site in j["peak_sites"] for f in site["frames"]]
    expect(frames and all(f == "/work/optim.py" for f in frames),
           "a torch 1.13 block's frames are not its history's: %s" % frames)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optmem", required=True)
    ap.add_argument("--snapshots", default=os.path.join(HERE, "..", "..", "..", "shared", "bench",
                                                        "snapshots"),
                    help="the bundled snapshots (../shared/bench/snapshots)")
    ap.add_argument("check", choices=["synthetic", "bundled", "corrupt", "report"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            globals()[args.check](args, tmp)
        except CheckError as e:
            print("FAIL: %s" % e, file=sys.stderr)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
