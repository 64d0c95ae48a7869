"""Checks of `optmem report` (tests/report/CMakeLists.txt runs one subcommand per test).

Usage: check_report.py --optmem CLI [--preload LIB] SUBCOMMAND [ARGS...]
Subcommands: golden NAME FIXTURE... (with --update to rewrite the golden file), chrome, svg, html, errors, merge, versions, fork, folds, symbolize PROGRAM, run PROGRAM, domains PROGRAM, names WORKLOAD.py, help."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from html import escape as html_escape

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tracer"))
sys.path.insert(0, os.path.join(HERE, ".."))
import report_schema  # noqa: E402
from checks import CheckError, cli, expect  # noqa: E402
from until_plan import run_until_plan  # noqa: E402
FIXTURES = os.path.join(HERE, "fixtures")
GOLDEN = os.path.join(HERE, "golden")
LOOP = os.path.join(FIXTURES, "train_loop.json")
DRIFT = os.path.join(FIXTURES, "train_drift.json")
SVG_NS = "{http://www.w3.org/2000/svg}"


def rep(args, argv, **kw):
    return cli(args, ["report"] + argv, **kw)


def golden(args, rest, tmp):
    """Output of --no-symbolize runs from the fixtures directory (relative names)."""
    name, files = rest[0], rest[1:]
    fmt = name.rsplit(".", 1)[1]
    argv = [] if fmt == "txt" else ["--format", fmt]
    out, _ = rep(args, files + argv + ["--no-symbolize", "--top", "5"], cwd=FIXTURES)
    path = os.path.join(GOLDEN, name)
    if args.update:
        with open(path, "w") as f:
            f.write(out)
        return
    with open(path) as f:
        want = f.read()
    if out != want:
        import difflib
        diff = "".join(difflib.unified_diff(want.splitlines(True), out.splitlines(True),
                                            "golden/" + name, "output"))
        raise CheckError("output differs from golden/%s:\n%s" % (name, diff))


def chrome(args, rest, tmp):
    out = os.path.join(tmp, "trace.json")
    rep(args, [LOOP, "--format", "chrome", "-o", out, "--no-symbolize"])
    with open(out) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    with open(LOOP) as f:
        report = json.load(f)
    records = [r for r in report["sample"]["lifetimes"] if r]
    counters = [e for e in events if e["ph"] == "C"]
    begins = [e for e in events if e["ph"] == "b"]
    ends = [e for e in events if e["ph"] == "e"]
    expect(len(counters) == len(records), "%d counter events for %d records" %
           (len(counters), len(records)))
    expect(all(e["name"] == "live bytes" and "cpu" in e["args"] for e in counters),
           "counter events lack the cpu series")
    expect(max(e["args"]["cpu"] for e in counters) <= report["lower_bound_bytes"],
           "a counter exceeds the lower bound")
    expect(len(begins) == len(records) == len(ends), "%d b and %d e events for %d records" %
           (len(begins), len(ends), len(records)))
    expect({e["id"] for e in begins} == {e["id"] for e in ends}, "b and e ids differ")
    expect(all(e["ts"] >= b["ts"] for b, e in zip(begins, ends)), "a slice ends before it begins")
    names = {e["name"] for e in begins}
    expect({"site_temp", "site_cross"} <= names, "slice names %s lack the call sites" % names)
    expect(any(e["ph"] == "M" and e["name"] == "process_name" and "4242" in e["args"]["name"]
               for e in events), "no process_name for pid 4242")
    expect(trace["metadata"]["optmem-slices-capped"] is False, "uncapped trace says capped")
    # A cap keeps the file bounded and says so.
    rep(args, [LOOP, "--format", "chrome", "-o", out, "--max-slices", "10"])
    with open(out) as f:
        trace = json.load(f)
    expect(sum(e["ph"] == "b" for e in trace["traceEvents"]) == 10, "the cap of 10 is not kept")
    expect(trace["metadata"]["optmem-slices-capped"] is True and
           trace["metadata"]["optmem-slice-cap"] == 10, "the cap is not in the metadata")
    expect("capped" in trace["otherData"]["note"], "otherData does not mention the cap")


def svg_tree(args, argv, tmp):
    out = os.path.join(tmp, "out.svg")
    rep(args, argv + ["--format", "svg", "-o", out, "--no-symbolize"])
    return ET.parse(out).getroot()


def svg(args, rest, tmp):
    root = svg_tree(args, [LOOP], tmp)
    expect(root.tag == SVG_NS + "svg", "root is %s" % root.tag)
    with open(LOOP) as f:
        report = json.load(f)
    placed = [r for r in report["sample"]["lifetimes"] if r and r[6] is not None]
    blocks = root.find(".//%sg[@class='blocks']" % SVG_NS)
    rects = blocks.findall(SVG_NS + "rect")
    expect(len(placed) > 0 and len(rects) == len(placed), "%d rects for %d placed blocks" %
           (len(rects), len(placed)))
    expect(all(float(r.get("width")) >= 0 and float(r.get("height")) > 0 for r in rects),
           "a rect has a negative size")
    expect(all("site_" in r.find(SVG_NS + "title").text for r in rects), "rect without a site")
    live = root.find(".//%spath[@class='live']" % SVG_NS)
    expect(live is not None and live.get("d").startswith("M"), "no live-bytes path")
    expect(root.find(".//%sline[@class='lower-bound']" % SVG_NS) is not None, "no lower bound")
    expect("arena offsets" in root.find(SVG_NS + "title").text, "title does not say offsets")
    # A report without offsets (trace mode) is drawn as live bytes only, and says so.
    for r in report["sample"]["lifetimes"]:
        if r:
            r[6] = None
    trace = os.path.join(tmp, "trace_mode.json")
    with open(trace, "w") as f:
        json.dump(report, f)
    root = svg_tree(args, [trace], tmp)
    expect(not root.find(".//%sg[@class='blocks']" % SVG_NS).findall(SVG_NS + "rect"),
           "blocks drawn without offsets")
    expect("live bytes only" in root.find(SVG_NS + "title").text, "title does not say why")
    # Two processes: two panels.
    root = svg_tree(args, [LOOP, DRIFT], tmp)
    panels = root.findall("./%sg/%ssvg" % (SVG_NS, SVG_NS))
    expect(len(panels) == 2, "%d panels for two reports" % len(panels))


def html(args, rest, tmp):
    out = os.path.join(tmp, "report.html")
    rep(args, [LOOP, DRIFT, "--format", "html", "-o", out])
    with open(out) as f:
        page = f.read()
    expect(not re.search(r"""(src|href)\s*=|url\(|https?://""", page),
           "the page refers to something outside itself")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    expect(chromium, "chromium is not installed (apt-get install chromium)")
    profile = tempfile.mkdtemp(dir=tmp)
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-quic", "--no-first-run", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync",
                           "--user-data-dir=" + profile, "--dump-dom", "file://" + out],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    dom = proc.stdout.decode()
    expect(proc.returncode == 0, "chromium exit %d: %s" % (proc.returncode,
                                                          proc.stderr.decode()[-2000:]))
    for needle in ("<h1>optmem report</h1>", "4242", "4343", "<svg", "<rect", "site_temp",
                   "Call sites live at the peak", "persistent"):
        expect(needle in dom, "the rendered page lacks %r" % needle)
    expect(dom.count("<tr>") >= 6, "the rendered page has few table rows")
    # The answer comes first: the summary, with the lower bound and the top site's short
    # name (the text report's), before the first picture.
    start, end = dom.find('<section id="summary">'), dom.find("</section>")
    expect(0 <= start < end < dom.find("<svg"), "the summary does not come before the pictures")
    block = dom[start:end]
    text, _ = rep(args, [LOOP, DRIFT, "--top", "1"])
    lines = text.splitlines()
    top = lines[[i for i, l in enumerate(lines) if l.lstrip().startswith("#1 ")][0] + 1].strip()
    expect('<b class="site">%s</b>' % html_escape(top) in block,
           "the summary lacks the top site %r" % top)
    expect("lower bound" in block and 'title="1703936 bytes"' in block,
           "the summary lacks the total lower bound")
    expect("the plan search saved" not in block, "a saving shown without the greedy figure")
    # With the greedy figure recorded, the saving is the two named numbers' difference.
    with open(DRIFT) as f:
        drift = json.load(f)
    drift["serving"]["plan_greedy_bytes"] = 1376256
    greedy = os.path.join(tmp, "greedy.json")
    with open(greedy, "w") as f:
        json.dump(drift, f)
    page, _ = rep(args, [greedy, "--format", "html"])
    block = page[page.find('<section id="summary">'):page.find("</section>")]
    expect("224.0 KiB (16.7 %): plan peak 1.1 MiB, greedy by size 1.3 MiB" in block,
           "the summary's saving: %s" % block[-1500:])


def errors(args, rest, tmp):
    with open(LOOP) as f:
        text = f.read()
    cases = {
        "truncated.json": (text[: len(text) // 2], r"not valid JSON: line \d+ column \d+"),
        "not_json.json": ("hello\n", r"not valid JSON: line 1 column \d+"),
        "empty.json": ("", r"not valid JSON"),
        "other.json": ('{"schema": "something-else", "version": 1}\n', r"not an optmem report"),
        "version.json": (text.replace('"version":1', '"version":99', 1), r"version"),
        "no_peak.json": (text.replace('"peak_live_bytes"', '"peak_bytes"', 1),
                         r"peak_live_bytes is missing"),
    }
    for name, (content, pattern) in cases.items():
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(content)
        for fmt in ("text", "html"):
            out, err = rep(args, [path, "--format", fmt], status=1)
            lines = err.strip().splitlines()
            expect(len(lines) == 1, "%s: %d error lines: %s" % (name, len(lines), err))
            expect(lines[0].startswith("optmem report: " + path + ": "), "%s: %s" % (name, err))
            expect(re.search(pattern, lines[0]), "%s: %r lacks %r" % (name, lines[0], pattern))
            expect(out == "", "%s: output despite the error" % name)
    missing = os.path.join(tmp, "missing.json")
    _, err = rep(args, [LOOP, missing], status=1)
    expect(err.strip() == "optmem report: %s: cannot open: No such file or directory" % missing,
           "missing file: %s" % err)
    # An output that cannot be written is an error too; bad usage is 2.
    rep(args, [LOOP, "-o", os.path.join(tmp, "no", "dir", "x.txt")], status=1)
    for argv in ([], [LOOP, "--format", "pdf"], [LOOP, "--top", "x"], [LOOP, "--bogus"]):
        _, err = rep(args, argv, status=2)
        expect(err.startswith("optmem report: ") or "usage" in err, "usage error: %s" % err)


def compact(r):
    """A version 1 report rewritten as version 2 writes it: each frame once, in the top-level
    tables, and sites holding indices (docs/report-schema.md)."""
    r = json.loads(json.dumps(r))
    frames, python, ids, pids = [], [], {}, {}
    for sec in [r] + r.get("device_domains", []):
        for s in sec["sites"]:
            for k, f in enumerate(s["frames"]):
                key = (f["address"], f["module"], f["offset"], f["function"])
                if key not in ids:
                    ids[key] = len(frames)
                    frames.append(f)
                s["frames"][k] = ids[key]
            for k, f in enumerate(s.get("python", [])):
                key = (f["file"], f["line"], f["function"])
                if key not in pids:
                    pids[key] = len(python)
                    python.append({"file": f["file"], "line": f["line"],
                                   "function": f["function"]})
                s["python"][k] = [pids[key], f["native_index"]]
    r.update(version=2, frames=frames, python_frames=python)
    return r


def sparse(v2):
    """A version 2 report as version 3 writes it: the same sites with ids that leave gaps (as
    a forked child's, or where sites were folded), the references renumbered with them."""
    r = json.loads(json.dumps(v2))
    r["version"] = 3
    ids = {s["id"]: 3 * s["id"] + 2 for s in r["sites"]}
    for s in r["sites"]:
        s["id"] = ids[s["id"]]
    for p in r["peak"]["sites"]:
        p["site"] = ids[p["site"]]
    for rec in r["sample"]["lifetimes"]:
        if rec:
            rec[0] = ids[rec[0]]
    for rec in r.get("resident", {}).get("blocks", []):
        rec[0] = ids[rec[0]]
    r["counters"]["folded_sites"] = 0
    return r


def versions(args, rest, tmp):
    """The same report written as version 1, 2 and 3 renders the same; a version 2 report
    whose sites point outside its tables, and a version 3 report whose ids do not ascend or
    are named and not listed, are refused with one line."""
    with open(LOOP) as f:
        v1 = json.load(f)
    # Python frames on the two largest sites at the peak, in place of their second frame
    # (an eval loop's, as if), and on the first one a frame past the native stack.
    a, b = (p["site"] for p in v1["peak"]["sites"][:2])
    v1["sites"][a]["python"] = [
        {"file": "/w/train.py", "line": 12, "function": "step", "native_index": 1},
        {"file": "/w/train.py", "line": 40, "function": "<module>", "native_index": None}]
    v1["sites"][b]["python"] = [
        {"file": "/w/train.py", "line": 12, "function": "step", "native_index": 1}]
    v2 = compact(v1)
    expect(len(v2["python_frames"]) == 2, "python frames not shared: %r" % v2["python_frames"])
    v3 = sparse(v2)
    outs = {}
    for version, r in ((1, v1), (2, v2), (3, v3)):
        d = os.path.join(tmp, "v%d" % version)
        os.mkdir(d)
        with open(os.path.join(d, "r.json"), "w") as f:
            json.dump(r, f)
        outs[version] = [rep(args, ["r.json", "--no-symbolize", "--format", fmt], cwd=d)[0]
                         for fmt in ("text", "folded", "json")]
    expect(outs[1] == outs[2], "versions 1 and 2 render differently:\n%s\n---\n%s" %
           (outs[1][0], outs[2][0]))
    expect(outs[1] == outs[3], "versions 1 and 3 render differently:\n%s\n---\n%s" %
           (outs[1][0], outs[3][0]))
    expect("step  /w/train.py:12" in outs[2][0], "no Python frame in:\n%s" % outs[2][0])
    # Folded stacks, outermost first: the frame past the native stack leads, the eval loop's
    # frame gives way to the Python frame it runs, as py-spy writes them.
    folded = outs[2][1].splitlines()
    expect(any(l.startswith("<module> (/w/train.py:40);") and ";step (/w/train.py:12);" in l
               for l in folded), "folded lacks the Python frames:\n%s" % outs[2][1])
    expect(sum(";step (/w/train.py:12);" in l for l in folded) == 2,
           "folded: not two stacks through the Python frame:\n%s" % outs[2][1])
    bad = json.loads(json.dumps(v2))
    bad["sites"][0]["frames"][0] = len(v2["frames"])
    bad_py = json.loads(json.dumps(v2))
    bad_py["sites"][b]["python"][0] = [7, 0]
    no_table = json.loads(json.dumps(v2))
    del no_table["frames"]
    # Version 3: ids ascend, references name listed ids, "folded" is version 3's.
    descending = json.loads(json.dumps(v3))
    descending["sites"][0]["id"], descending["sites"][1]["id"] = (
        descending["sites"][1]["id"], descending["sites"][0]["id"])
    dangling = json.loads(json.dumps(v3))
    dangling["peak"]["sites"][0]["site"] += 1  # a gap: no site has that id
    folded_v2 = json.loads(json.dumps(v2))
    folded_v2["sites"][0]["folded"] = 3
    for name, r, pattern in (("bad_frame.json", bad, r"not an index of frames"),
                             ("bad_python.json", bad_py, r"python_frames index"),
                             ("no_table.json", no_table, r"frames is missing"),
                             ("descending.json", descending, r"id is not above"),
                             ("dangling.json", dangling, r"peak.sites\[0\].site is not a site"),
                             ("folded_v2.json", folded_v2, r"folded in a version 2")):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(r, f)
        _, err = rep(args, [path], status=1)
        lines = err.strip().splitlines()
        expect(len(lines) == 1 and re.search(pattern, lines[0]),
               "%s: %r lacks %r" % (name, err, pattern))


def merge(args, rest, tmp):
    out, _ = rep(args, [LOOP, DRIFT, "--format", "json", "--no-symbolize"])
    summary = json.loads(out)
    pids = [p["pid"] for p in summary["processes"]]
    expect(pids == [4242, 4343], "pids %s" % pids)
    loop, drift = (json.load(open(p)) for p in (LOOP, DRIFT))
    totals = summary["totals"]
    expect(totals["processes"] == 2, "totals %s" % totals)
    expect(totals["peak_live_bytes"] == loop["peak_live_bytes"] + drift["peak_live_bytes"],
           "peak total %s" % totals)
    expect(totals["lower_bound_bytes"] == loop["lower_bound_bytes"] + drift["lower_bound_bytes"],
           "lower bound total %s" % totals)
    at_peak = sum(s["bytes"] for s in loop["peak"]["sites"] + drift["peak"]["sites"])
    out, _ = rep(args, [LOOP, DRIFT, "--format", "json", "--no-symbolize", "--top", "1000"])
    expect(sum(s["bytes"] for s in json.loads(out)["peak_sites"]) == at_peak,
           "merged sites do not add up to the peaks")
    text, _ = rep(args, [LOOP, DRIFT, "--no-symbolize"])
    expect(re.search(r"^\s+4242\s", text, re.M) and re.search(r"^\s+4343\s", text, re.M),
           "text lacks a row per pid:\n" + text)
    # The same report twice (two ranks of one program): sites merge across processes.
    out, _ = rep(args, [LOOP, LOOP, "--format", "json", "--no-symbolize"])
    expect(all(s["processes"] == 2 for s in json.loads(out)["peak_sites"]),
           "identical stacks were not merged")


# A parent that requests from many lines (one call site each), frees those blocks, keeps one,
# and forks a child that requests from one line of its own.
FORKING = r"""
import os, sys
PARENT_SITES = 60
exec(compile("\n".join("b = bytearray(%d); del b" % (8192 + 64 * i)
                         for i in range(PARENT_SITES)), "parent_lines.py", "exec"))
kept = bytearray(1 << 16)
pid = os.fork()
if pid == 0:
    for _ in range(5):
        c = bytearray(20000); del c
    sys.exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def fork(args, rest, tmp):
    """A forked child's report lists the sites it used, not every site its parent had; optmem
    report reads it alone and merged with its parent's."""
    env = dict(os.environ, LD_PRELOAD=args.preload, OPTMEM_MODE="trace",
               OPTMEM_REPORT=os.path.join(tmp, "r_%p.json"))
    proc = subprocess.run(["/usr/bin/python3", "-c", FORKING], env=env, capture_output=True,
                          text=True, timeout=120)
    expect(proc.returncode == 0, "the forking program failed:\n" + proc.stderr[-2000:])
    paths = sorted(os.path.join(tmp, n) for n in os.listdir(tmp) if n.startswith("r_"))
    reports = {}
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        report_schema.validate(r)
        reports[path] = r
    children = [p for p, r in reports.items() if r["process"]["forked_at_request"] is not None]
    parents = [p for p, r in reports.items() if r["process"]["forked_at_request"] is None]
    expect(len(children) == 1 and len(parents) == 1, "reports %s" % sorted(reports))
    child, parent = reports[children[0]], reports[parents[0]]
    # Every site the child lists is one it requested from, or one its report names (the
    # block it inherited, live at its peak and before its sample).
    named = {p["site"] for p in child["peak"]["sites"]}
    named |= {b[0] for b in child["resident"]["blocks"]}
    named |= {rec[0] for rec in child["sample"]["lifetimes"] if rec}
    idle = [s["id"] for s in child["sites"] if s["count"] == 0 and s["id"] not in named]
    expect(not idle, "the child lists %d sites it did not use: %s" % (len(idle), idle[:10]))
    expect(child["counters"]["call_sites"] < parent["counters"]["call_sites"] - 50,
           "the child lists %d sites, its parent %d" % (child["counters"]["call_sites"],
                                                        parent["counters"]["call_sites"]))
    expect(sum(s["count"] for s in child["sites"]) == child["counters"]["managed_requests"] == 5,
           "the child's sites do not add up to its 5 requests")
    # Its tables hold only the frames of the sites it lists.
    used = {f for s in child["sites"] for f in s["frames"]}
    expect(used == set(range(len(child["frames"]))), "the child's frames table holds frames "
           "no site lists: %d of %d used" % (len(used), len(child["frames"])))
    used_py = {p for s in child["sites"] for p, _ in s["python"]}
    expect(used_py == set(range(len(child["python_frames"]))),
           "the child's python_frames hold frames no site lists")
    for fmt in ("text", "json", "folded", "chrome", "svg", "html"):
        rep(args, [children[0], "--format", fmt, "--no-symbolize"])
    out, _ = rep(args, [parents[0], children[0], "--format", "json", "--no-symbolize",
                        "--top", "1000"])
    summary = json.loads(out)
    expect(sorted(p["pid"] for p in summary["processes"]) ==
           sorted(r["process"]["pid"] for r in (parent, child)), "merged pids")
    at_peak = sum(s["bytes"] for r in (parent, child) for s in r["peak"]["sites"])
    expect(sum(s["bytes"] for s in summary["peak_sites"]) == at_peak,
           "merged sites do not add up to the peaks")
    # The block the child inherited is the parent's site too: one merged site of both.
    expect(any(s["processes"] == 2 for s in summary["peak_sites"]),
           "no site merged across parent and child")


# A warm-up that requests once from each of 300 lines, through one function (as imports read
# files through importlib's get_data), makes the run's peak with one block from a line of its
# own, and frees them all; then a loop whose iterations the tracer finds.
FOLDING = r"""
def once(n):
    return bytearray(n)

WARMUP = 300
exec(compile("\n".join("b = once(%d); del b" % (8192 + 64 * i) for i in range(WARMUP)),
             "warmup_lines.py", "exec"))
big = bytearray(64 << 20)
del big

def step():
    a = bytearray(40000)
    b = bytearray(50000)
    del a
    c = bytearray(30000)
    del b, c

for _ in range(40):
    step()
"""


def folds(args, rest, tmp):
    """Call sites seen once before the first steady iteration fold into one entry of their
    innermost frames: the counts still add up, the peak's site keeps its stack, and the sample
    and the resident blocks name no fold."""
    path = os.path.join(tmp, "r.json")
    env = dict(os.environ, LD_PRELOAD=args.preload, OPTMEM_MODE="trace", OPTMEM_REPORT=path)
    proc = subprocess.run(["/usr/bin/python3", "-c", FOLDING], env=env, capture_output=True,
                          text=True, timeout=120)
    expect(proc.returncode == 0, "the program failed:\n" + proc.stderr[-2000:])
    with open(path) as f:
        r = json.load(f)
    report_schema.validate(r)  # version 3: the counts add up to managed_requests
    expect(r["iterations"]["found"], "no iterations found")
    pf = r["python_frames"]

    def innermost(s):
        return pf[s["python"][0][0]] if s["python"] else {}

    warm = [s for s in r["sites"] if innermost(s).get("function") == "once"]
    expect(len(warm) == 1 and warm[0].get("folded") == 300,
           "the warm-up's 300 sites are not one fold of 300: %s" %
           [(s["id"], s.get("folded"), s["count"]) for s in warm][:8])
    f = warm[0]
    sizes = [8192 + 64 * i + 1 for i in range(300)]  # a bytearray's buffer ends in a NUL
    expect(f["count"] == 300 and f["total_bytes"] == sum(sizes) and f["min_size"] == sizes[0]
           and f["max_size"] == sizes[-1] and f["freed"] == 300 and len(f["python"]) == 1,
           "the fold's counters: %s" % {k: f[k] for k in ("count", "total_bytes", "min_size",
                                                           "max_size", "freed")})
    expect(r["counters"]["folded_sites"] >= 300, "counters %s" % r["counters"])
    # The peak's block came once, before the loop: its site is named, with its whole stack.
    top = next(s for s in r["sites"] if s["id"] == r["peak"]["sites"][0]["site"])
    expect("folded" not in top and top["max_size"] == (64 << 20) + 1 and len(top["python"]) >= 1
           and pf[top["python"][0][0]]["file"] == "<string>",
           "the peak's site is not the 64 MiB line's: %s" % top)
    folded_ids = {s["id"] for s in r["sites"] if "folded" in s}
    named = {rec[0] for rec in r["sample"]["lifetimes"] if rec}
    named |= {b[0] for b in r["resident"]["blocks"]}
    expect(not named & folded_ids, "the sample or the resident blocks name a fold")
    # Every format reads it.
    for fmt in ("text", "json", "folded", "chrome", "svg", "html"):
        rep(args, [path, "--format", fmt, "--no-symbolize"])


def symbolize(args, rest, tmp):
    src = os.path.join(HERE, "sym_target.c")
    lines = {}
    with open(src) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"LINE:(\w+)", text)
            if m:
                lines[m.group(1)] = no
    prog = os.path.join(tmp, "sym_target")
    shutil.copy(rest[0], prog)
    env = dict(os.environ, LD_PRELOAD=args.preload, OPTMEM_MODE="trace",
               OPTMEM_REPORT=os.path.join(tmp, "sym.json"))
    subprocess.run([prog], env=env, check=True, timeout=120)
    rpath = os.path.join(tmp, "sym.json")

    def frames():
        out, _ = rep(args, [rpath, "--format", "json"])
        return json.loads(out)["peak_sites"][0]["frames"]

    f = frames()
    want = [("inner_alloc", "inner", True), ("outer_site", "outer", False),
            ("main", "main", False)]
    for k, (func, mark, inlined) in enumerate(want):
        got = f[k]
        expect(got["function"] == func and got["inlined"] == inlined and
               got["file"] and got["file"].endswith("sym_target.c") and
               got["line"] == lines[mark],
               "frame %d is %s, expected %s at sym_target.c:%d%s" %
               (k, got, func, lines[mark], " (inlined)" if inlined else ""))
    text, _ = rep(args, [rpath])
    expect("inner_alloc  %s:%d  [inlined]" % (f[0]["file"], lines["inner"]) in text,
           "text lacks the inlined frame:\n" + text)
    # The site is named by its innermost frame and the outermost one inside main.
    expect("\n      inner_alloc \u2190 outer_site\n" in text, "text lacks the site's name:\n" + text)
    # Without debug info: symbol names only; without the file: the report's module+offset.
    subprocess.run(["objcopy", "--strip-debug", prog], check=True)
    f = frames()
    expect(f[0]["function"] == "outer_site" and f[0]["file"] is None,
           "stripped: first frame %s" % f[0])
    os.unlink(prog)
    f = frames()
    expect(f[0]["function"] is None and f[0]["module"] == prog and f[0]["offset"],
           "missing file: first frame %s" % f[0])
    text, _ = rep(args, [rpath])
    expect("sym_target+0x" in text, "missing file: no module+offset in\n" + text)


PLUMBING = {"alloc_cpu", "c10::alloc_cpu", "empty_generic", "empty_cpu", "malloc", "calloc",
            "operator new", "allocate", "_PyObject_Malloc", "PyObject_Malloc", "PyMem_Malloc"}


def site_names(text):
    """The short name under each "  #N" line of a text report."""
    lines = text.splitlines()
    return [lines[i + 1].strip() for i, l in enumerate(lines[:-1]) if re.match(r"  #\d+ ", l)]


def names(args, rest, tmp):
    """A PyTorch workload's call sites are named after the code that asked, not the allocator,
    in every format; --full-names brings C++ argument lists back."""
    path = os.path.join(tmp, "names.json")
    proc = subprocess.run([args.optmem, "run", "--mode", "trace", "--stack-depth", "32", "-o",
                           path, "--", sys.executable, rest[0], "--steps", "2", "--threads", "1"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    expect(proc.returncode == 0, "workload: exit %d: %s" % (proc.returncode,
                                                           proc.stderr.decode()[-2000:]))
    text, _ = rep(args, [path, "--top", "5"])
    short = site_names(text)
    expect(len(short) == 5, "%d site names in\n%s" % (len(short), text))
    for name in short:
        where = name.split(" \u2190 ")[0]
        expect(where not in PLUMBING and where.split("::")[-1] not in PLUMBING,
               "a site is named after allocator plumbing: %r\n%s" % (name, text))
        expect("(" not in where and "<" not in where, "a short name has arguments: %r" % name)
    funcs = [l.strip().split("  ")[0] for l in text.splitlines() if l.startswith("        ")]
    expect("c10::alloc_cpu" in funcs, "no shortened c10::alloc_cpu frame in\n" + text)
    expect(not any("(" in f and "anonymous" not in f for f in funcs),
           "a frame keeps its argument list:\n" + text)
    full, _ = rep(args, [path, "--top", "5", "--full-names"])
    expect("c10::alloc_cpu(unsigned long)" in full,
           "--full-names lacks c10::alloc_cpu(unsigned long):\n" + full)
    expect(any("(" in n for n in site_names(full)),
           "--full-names site names lack argument lists: %s" % site_names(full))
    # The same names in the other formats.
    trace = os.path.join(tmp, "trace.json")
    rep(args, [path, "--format", "chrome", "-o", trace])
    with open(trace) as f:
        slices = {e["name"] for e in json.load(f)["traceEvents"] if e["ph"] == "b"}
    expect(slices and not any("(" in n for n in slices),
           "chrome slices named with arguments: %s" % [n for n in slices if "(" in n][:5])
    expect(set(short) & slices,
           "no chrome slice carries a top site's name %s" % short)
    folded, _ = rep(args, [path, "--format", "folded"])
    leaves = [l.rsplit(" ", 1)[0].split(";")[-1] for l in folded.splitlines()]
    expect(leaves and not any(l.split("::")[-1] in PLUMBING for l in leaves),
           "a folded stack ends in plumbing: %s" %
           [l for l in leaves if l.split("::")[-1] in PLUMBING][:3])
    expect(any("c10::alloc_cpu" in l for l in folded.splitlines()) is False,
           "folded stacks keep the plumbing under the named frame")
    html = os.path.join(tmp, "names.html")
    rep(args, [path, "--format", "html", "-o", html])
    with open(html) as f:
        page = f.read()
    expect('<b class="site">' in page and short[0].split(" ")[0] in page,
           "the html legend lacks the short name %r" % short[0])


def run(args, rest, tmp):
    """optmem run prints where the report is and how to look at it."""
    template = os.path.join(tmp, "run.%p.json")
    # The summary's plan lines need a plan, searched on the optmem-plan thread (the default):
    # the loop goes on until its report shows one (30 iterations of microseconds end first).
    rc, _, err, planned = run_until_plan(
        [args.optmem, "run", "-o", template, "--", rest[0], "30", "--until-eof"],
        os.path.join(tmp, "run.*.json"), env=dict(os.environ))
    expect(rc == 0, "optmem run: exit %d: %s" % (rc, err))
    expect(planned, "no plan in the run's report within 120 s:\n" + err)
    m = re.search(r"^optmem: report: (\S+)$", err, re.M)
    expect(m and os.path.exists(m.group(1)), "no report path in:\n" + err)
    path = m.group(1)
    for needle in ("peak RSS", "lower bound", "peak live", "plan efficiency",
                   "served from the plan", "optmem report " + path,
                   "optmem report %s --format html -o report.html" % path):
        expect(needle in err, "summary lacks %r:\n%s" % (needle, err))
    # How long the search took and on which thread (the default's: optmem-plan).
    text = rep(args, [path])[0]
    expect(re.search(r"plan search +[0-9.]+ ms on the optmem-plan thread;", text),
           "the report does not say where and how long the plan was searched:\n" + text)
    proc = subprocess.run([args.optmem, "run", "-o", os.path.join(tmp, "none", "r.json"), "--",
                           "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = proc.stderr.decode()
    missing = [l for l in err.splitlines() if "no report" in l]
    expect(proc.returncode == 0 and len(missing) == 1, "missing report:\n" + err)
    # --cuda: the device domain on unless the user chose, PyTorch's stream-ordered backend
    # added to the user's allocator settings unless they chose a backend.
    show = ["/bin/sh", "-c", 'echo "$OPTMEM_DEVICES|$PYTORCH_CUDA_ALLOC_CONF"']
    for env, want in (({}, "cpu,cuda|backend:cudaMallocAsync"),
                      ({"OPTMEM_DEVICES": "cuda",
                        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                       "cuda|expandable_segments:True,backend:cudaMallocAsync"),
                      ({"PYTORCH_CUDA_ALLOC_CONF": "backend:native"},
                       "cpu,cuda|backend:native")):
        full = {k: v for k, v in os.environ.items()
                if k not in ("OPTMEM_DEVICES", "PYTORCH_CUDA_ALLOC_CONF")}
        full.update(env)
        proc = subprocess.run([args.optmem, "run", "-o", os.path.join(tmp, "cuda.%p.json"),
                               "--cuda", "--"] + show, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=60, env=full)
        got = proc.stdout.decode().strip()
        expect(proc.returncode == 0 and got == want,
               "optmem run --cuda with %s: %r, expected %r" % (env, got, want))


def human(n):
    """om_human_bytes."""
    v, units = float(n), ["B", "KiB", "MiB", "GiB", "TiB"]
    u = 0
    while v >= 1024 and u + 1 < len(units):
        v /= 1024
        u += 1
    return "%d B" % n if u == 0 else "%.1f %s" % (v, units[u])


def domains(args, rest, tmp):
    """A report with a device domain (written by tests/tracer/domains_report.c, which prints
    the figures it recorded): valid, and every format shows the domain --domain names."""
    path = os.path.join(tmp, "domains.json")
    proc = subprocess.run([rest[0], path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120)
    expect(proc.returncode == 0, "domains_report: exit %d: %s" % (proc.returncode,
                                                                 proc.stderr.decode()))
    want = json.loads(proc.stdout.decode())
    with open(path) as f:
        report = json.load(f)
    report_schema.validate(report)
    report_schema.expand(report)
    expect(report["domains"] == ["cpu", "cuda:0"], "domains %s" % report["domains"])
    expect(len(report["device_domains"]) == 1 and "serving" not in report,
           "expected one device domain and no host serving")
    sections = {"cpu": report, "cuda:0": report["device_domains"][0]}
    expect(sections["cuda:0"]["name"] == "cuda:0", "device domain name")
    for name, sec in sections.items():
        w = want[name]
        for key in ("managed_requests", "managed_frees", "live_blocks", "live_bytes",
                    "call_sites"):
            expect(sec["counters"][key] == w[key], "%s counters.%s: %s, expected %s" %
                   (name, key, sec["counters"][key], w[key]))
        for key in ("lower_bound_bytes", "peak_live_bytes"):
            expect(sec[key] == w[key], "%s %s: %s, expected %s" % (name, key, sec[key], w[key]))
        expect(sec["iterations"]["period_requests"] == w["period_requests"],
               "%s period %s, expected %s" % (name, sec["iterations"]["period_requests"],
                                              w["period_requests"]))
        expect(sec["iterations"]["marks"]["count"] == w["marks"], "%s marks" % name)
        prefix = "gpu_" if name == "cuda:0" else "host_"
        funcs = {s["frames"][0]["function"] for s in sec["sites"]}
        expect(all(f and f.startswith(prefix) for f in funcs), "%s sites %s" % (name, funcs))
    dev, dw = sections["cuda:0"], want["cuda:0"]
    for key, v in dw["serving"].items():
        expect(dev["serving"][key] == v, "cuda:0 serving.%s: %s" % (key, dev["serving"][key]))
    expect(any(r and r[6] is not None for r in dev["sample"]["lifetimes"]),
           "no device block has an arena offset")

    # Text: the device domain's own numbers, and the host's page names it.
    text, _ = rep(args, [path, "--domain", "cuda:0", "--no-symbolize"])
    for pattern, value in ((r"managed requests\s+(\d+) in", dw["managed_requests"]),
                           (r"peak live .*\((\d+) bytes held", dw["peak_live_bytes"]),
                           (r"lower bound .*\((\d+) bytes live", dw["lower_bound_bytes"]),
                           (r"period (\d+) requests", dw["period_requests"]),
                           (r"served from plan\s+(\d+) of", dw["serving"]["served_from_plan"])):
        m = re.search(pattern, text)
        expect(m and int(m.group(1)) == value, "--domain cuda:0 text: %r is not %s in\n%s" %
               (pattern, value, text))
    expect(text.splitlines()[1] == "memory domain cuda:0", "the text does not say the domain")
    expect("host_" not in text and "gpu_act" in text, "the text shows the wrong call sites")
    text, _ = rep(args, [path, "--no-symbolize"])
    m = re.search(r"^  device domain\s+cuda:0: (\d+) managed requests, lower bound (.+), "
                  r"peak live (.+); --domain cuda:0 shows it$", text, re.M)
    expect(m and int(m.group(1)) == dw["managed_requests"] and
           m.group(2) == human(dw["lower_bound_bytes"]) and
           m.group(3) == human(dw["peak_live_bytes"]),
           "the host's summary lacks the device domain line:\n" + text)
    m = re.search(r"managed requests\s+(\d+) in", text)
    expect(m and int(m.group(1)) == want["cpu"]["managed_requests"], "host text:\n" + text)
    expect("memory domain" not in text and "gpu_act" not in text, "host text shows the device")
    plain, _ = rep(args, [path, "--domain", "cpu", "--no-symbolize"])
    expect(plain == text, "--domain cpu differs from the default")

    # Every other format works on the domain's sections.
    records = [r for r in dev["sample"]["lifetimes"] if r]
    out = os.path.join(tmp, "trace.json")
    rep(args, [path, "--domain", "cuda:0", "--format", "chrome", "-o", out])
    with open(out) as f:
        events = json.load(f)["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    expect(len(counters) == len(records) and
           all("cuda:0" in e["args"] and "cpu" not in e["args"] for e in counters),
           "chrome: %d counters of the cuda:0 series for %d records" %
           (len(counters), len(records)))
    names = {e["name"] for e in events if e["ph"] == "b"}
    expect(names and all(n.startswith("gpu_") for n in names), "chrome slices %s" % names)
    expect(any(e["ph"] == "M" and e["name"] == "process_name" and "cuda:0" in e["args"]["name"]
               for e in events), "chrome: the process name lacks the domain")
    folded, _ = rep(args, [path, "--domain", "cuda:0", "--format", "folded", "--no-symbolize"])
    lines = folded.splitlines()
    expect(lines and all(l.rsplit(";", 1)[-1].startswith("gpu_") for l in lines),
           "folded:\n" + folded)
    expect(sum(int(l.rsplit(" ", 1)[1]) for l in lines) == dw["lower_bound_bytes"],
           "folded weights do not add up to the device lower bound")
    root = svg_tree(args, [path, "--domain", "cuda:0"], tmp)
    rects = root.find(".//%sg[@class='blocks']" % SVG_NS).findall(SVG_NS + "rect")
    placed = [r for r in records if r[6] is not None]
    expect(len(rects) == len(placed), "svg: %d rects for %d placed blocks" %
           (len(rects), len(placed)))
    expect("cuda:0" in root.find(SVG_NS + "title").text, "svg title lacks the domain")
    summary = json.loads(rep(args, [path, "--domain", "cuda:0", "--format", "json"])[0])
    p = summary["processes"][0]
    expect(summary["domain"] == "cuda:0" and p["managed_requests"] == dw["managed_requests"] and
           p["lower_bound_bytes"] == dw["lower_bound_bytes"] and p["device_domains"] == [],
           "json --domain cuda:0: %s" % p)
    summary = json.loads(rep(args, [path, "--format", "json"])[0])
    expect(summary["domain"] == "cpu" and summary["processes"][0]["device_domains"] ==
           [{"name": "cuda:0", "managed_requests": dw["managed_requests"],
             "lower_bound_bytes": dw["lower_bound_bytes"],
             "peak_live_bytes": dw["peak_live_bytes"]}], "json: %s" % summary["processes"][0])
    page, _ = rep(args, [path, "--domain", "cuda:0", "--format", "html"])
    expect("Memory domain <b>cuda:0</b>" in page and "gpu_act" in page and "host_act" not in page,
           "html --domain cuda:0 does not show the domain")
    page, _ = rep(args, [path, "--format", "html"])
    expect("<h2>Device domains</h2>" in page and "<td>cuda:0</td>" in page,
           "the host's html page lacks the device domains")

    # A domain the report lacks: one line, status 1, for the new report and an old one.
    for report_path, have in ((path, "cpu, cuda:0"), (LOOP, "cpu")):
        for fmt in ("text", "chrome", "svg"):
            out, err = rep(args, [report_path, "--domain", "cuda:7", "--format", fmt], status=1)
            expect(out == "" and err == "optmem report: %s: no memory domain 'cuda:7' in this "
                   "report (it has %s)\n" % (report_path, have), "unknown domain: %r" % err)
    # A damaged device section fails when it is shown, and only then.
    del report["device_domains"][0]["sites"]
    broken = os.path.join(tmp, "broken.json")
    with open(broken, "w") as f:
        json.dump(report, f)
    _, err = rep(args, [broken, "--domain", "cuda:0"], status=1)
    expect(re.fullmatch(r"optmem report: \S+: not a valid optmem report: sites is missing "
                        r"\(domain cuda:0\)\n",
                        err), "damaged device domain: %r" % err)
    rep(args, [broken])


def help_(args, rest, tmp):
    out, _ = cli(args, ["--help"])
    expect(re.search(r"^\s+report\s", out, re.M), "optmem --help lacks report:\n" + out)
    out, _ = cli(args, ["report", "--help"])
    for needle in ("--format", "chrome", "folded", "svg", "html", "--top", "--domain",
                   "--full-names", "Exit status"):
        expect(needle in out, "optmem report --help lacks %r" % needle)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optmem", required=True)
    ap.add_argument("--preload")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("command")
    ap.add_argument("rest", nargs="*")
    args = ap.parse_args()
    commands = {"golden": golden, "chrome": chrome, "svg": svg,
                "html": html, "errors": errors, "merge": merge, "symbolize": symbolize,
                "run": run, "domains": domains, "help": help_, "names": names,
                "versions": versions, "fork": fork, "folds": folds}
    tmp = tempfile.mkdtemp(prefix="optmem-report-test.")
    try:
        commands[args.command](args, args.rest, tmp)
    except (CheckError, subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
        print("FAIL %s: %s" % (args.command, e), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok %s" % args.command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
