"""What a new user sees on a script the tests did not model (tests/report/CMakeLists.txt).

Usage: check_user_script.py --optmem CLI SCRIPT.py
Runs SCRIPT (tests/report/user/train.py: torchvision's SqueezeNet and SGD; user/fit.py: numpy
and scikit-learn) as a user would, `optmem run -o r.json -- python3 SCRIPT`, and checks
`optmem report`'s answers:
- the top 3 sites at the peak are named after the script's own lines: `SCRIPT:LINE FUNCTION`,
  LINE inside FUNCTION's body in the script (read with ast); the first part of each of the top
  10 names is neither allocator plumbing, nor a C++ name with arguments, nor an unnamed
  `module+0xoffset` frame; the text report shows the same names;
- a PyTorch script's forward, backward and step lines are all named among the top 10, and the
  inferred breakdown's parameters, gradients (most live) and optimizer state (SGD's momentum)
  are exactly the bytes of the model's parameters of at least min_bytes (the rules' one
  stated gap, docs/report-formats.md "Breakdown");
- folded stacks carry the script's Python frames, `function (path:line)`;
- the html report names the top site;
- the memory-viz export loads with torch 1.13's torch.cuda._memory_viz, and its allocations'
  frames include the script's lines."""
import argparse
import ast
import html
import io
import contextlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

from checks import expect, run_main

PLUMBING = {"alloc_cpu", "empty_generic", "empty_cpu", "empty_strided_cpu", "malloc", "calloc",
            "realloc", "operator new", "allocate", "_PyObject_Malloc", "PyObject_Malloc",
            "PyMem_Malloc", "PyMem_Calloc"}
ARROW = " \u2190 "


def functions_of(script):
    """{line: name of the innermost function whose body holds it} (module level: <module>)."""
    with open(script) as f:
        tree = ast.parse(f.read())
    owner = {}

    def walk(node, name):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, child.name)
                continue
            for line in range(getattr(child, "lineno", 0), getattr(child, "end_lineno", 0) + 1):
                owner.setdefault(line, name)
            walk(child, name)

    walk(tree, "<module>")
    return owner


def loop_lines(script):
    """The lines of the training loop's forward (model(x)), backward and step calls."""
    with open(script) as f:
        lines = f.read().splitlines()
    want = {"forward": r"= model\(", "backward": r"\.backward\(\)", "step": r"opt\.step\(\)"}
    found = {}
    for what, pattern in want.items():
        hits = [i + 1 for i, l in enumerate(lines) if re.search(pattern, l)]
        expect(len(hits) == 1, "%s: %d lines match %r" % (script, len(hits), pattern))
        found[what] = hits[0]
    return found


def run(argv, **kw):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240, **kw)
    expect(proc.returncode == 0, "%s: exit %d: %s" % (" ".join(argv[:3]), proc.returncode,
                                                     proc.stderr.decode()[-2000:]))
    return proc.stdout.decode()


def check_names(sites, script, text, torch):
    base = os.path.basename(script)
    owner = functions_of(script)
    named = set()
    for rank, site in enumerate(sites):
        name = site["name"]
        where = name.split(ARROW)[0]
        expect(where.split("::")[-1] not in PLUMBING,
               "site #%d is named after allocator plumbing: %r" % (rank + 1, name))
        expect("(" not in where and "<" not in where.replace("<module>", ""),
               "site #%d's name keeps C++ arguments: %r" % (rank + 1, name))
        expect(not re.search(r"\+0x[0-9a-f]+$", where),
               "site #%d is named after an unnamed frame: %r" % (rank + 1, name))
        m = re.search(re.escape(base) + r":(\d+) (\S+)$", name)
        if rank < 3:
            expect(m, "site #%d does not name the script's line: %r (top sites: %s)" %
                   (rank + 1, name, [s["name"] for s in sites]))
        if m:
            line, func = int(m.group(1)), m.group(2)
            expect(owner.get(line) == func, "site #%d names %s:%d %s, but that line is in %s"
                   % (rank + 1, base, line, func, owner.get(line)))
            named.add(line)
        expect("\n      %s\n" % name in text, "the text report lacks site name %r" % name)
    if torch:
        for what, line in loop_lines(script).items():
            expect(line in named, "no top site names the %s, %s:%d (named lines %s)" %
                   (what, base, line, sorted(named)))
        print("ok names: forward, backward and step among the top %d" % len(sites))
    print("ok names: the top 3 sites name %s's lines: %s" % (base, [s["name"] for s in sites[:3]]))
    return re.search(re.escape(base) + r":\d+ (\S+)$", sites[0]["name"]).group(1)


def check_breakdown(bd, truth, min_bytes):
    expect(bd["found"], "no breakdown: %s" % bd)
    traced = sum(b for b in truth["parameters"] if b >= min_bytes)
    cls = bd["classes"]
    for key, field in (("parameters", "at_peak_bytes"), ("gradients", "max_live_bytes"),
                       ("optimizer_state", "at_peak_bytes")):
        expect(cls[key][field] == traced, "breakdown %s %s: %d bytes, the model's parameters of "
               "at least %d bytes are %d (all: %d)" % (key, field, cls[key][field], min_bytes,
                                                        traced, sum(truth["parameters"])))
    print("ok breakdown: parameters, gradients and momentum %d bytes, as the model's parameters "
          "of at least %d bytes" % (traced, min_bytes))


def check_memviz(path, script):
    from torch.cuda import _memory_viz as mv  # Debian's python3-torch 1.13
    with open(path, "rb") as f:
        snap = pickle.load(f)
    expect(set(snap) >= {"segments", "device_traces"}, "memory-viz keys: %s" % sorted(snap))
    with contextlib.redirect_stdout(io.StringIO()):
        folded = mv.segments(snap["segments"], format_flamegraph=lambda t: t)
    expect(folded.strip(), "torch.cuda._memory_viz.segments gave nothing")
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    mine = [e for e in allocs if any(fr["filename"] == script for fr in e["frames"])]
    expect(allocs and mine, "no allocation of the memory-viz trace has a frame of %s" % script)
    for e in snap["device_traces"][0]:
        expect({"action", "addr", "size", "stream", "time_us", "frames"} <= set(e),
               "a trace event lacks a key: %s" % sorted(e))
    print("ok memory-viz: loads in torch.cuda._memory_viz; %d of %d allocations have %s's frames"
          % (len(mine), len(allocs), os.path.basename(script)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optmem", required=True)
    ap.add_argument("script")
    args = ap.parse_args()
    script = os.path.abspath(args.script)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        out = run([args.optmem, "run", "-o", report, "--", sys.executable, script])
        with open(script) as f:
            torch = re.search(r"^import torch$", f.read(), re.M) is not None
        with open(report) as f:
            min_bytes = json.load(f)["configuration"]["min_bytes"]
        summary = json.loads(run([args.optmem, "report", report, "--format", "json"]))
        text = run([args.optmem, "report", report])
        func = check_names(summary["peak_sites"], script, text, torch)
        if torch:
            truth = json.loads(out.strip().splitlines()[-1])
            check_breakdown(summary["processes"][0]["breakdown"], truth, min_bytes)
        folded = run([args.optmem, "report", report, "--format", "folded"])
        frame = re.compile(r"(^|;)%s \(%s:\d+\)(;|$)" % (re.escape(func), re.escape(script)))
        expect(any(frame.search(l.rsplit(" ", 1)[0]) for l in folded.splitlines()),
               "no folded stack has the frame '%s (%s:LINE)'" % (func, script))
        print("ok folded: stacks carry the script's Python frames")
        page = os.path.join(tmp, "r.html")
        run([args.optmem, "report", report, "--format", "html", "-o", page])
        with open(page) as f:
            expect(html.escape(summary["peak_sites"][0]["name"], quote=False) in f.read(),
                   "the html report lacks the top site's name")
        print("ok html: names the top site")
        viz = os.path.join(tmp, "s.pickle")
        run([args.optmem, "report", report, "--format", "memory-viz", "-o", viz])
        check_memviz(viz, script)


if __name__ == "__main__":
    run_main(main)
