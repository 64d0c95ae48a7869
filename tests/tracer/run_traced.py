"""Runs a program under LD_PRELOAD=liboptmem.so OPTMEM_MODE=trace and checks its report.

Subcommands: train-loop (expected figures derived from train_loop.c's constants), fork
(one report per process), varying (varying_frame.c: every request's stack is its own, under
a frame whose size varies), shared-slot (shared_slot.c: two stacks alike up to the caller of
leaf(), alternating: each request is its own site's), workload (a bundled PyTorch workload:
the detected period must equal the managed requests between its optmem_step() marks). Exit status 0 on success.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_schema  # noqa: E402

# train_loop.c's structure (keep in step with its #defines).
PERSIST = [65536 + 32768 * k for k in range(3)]
SETUP = 8192
TEMPS = [4096 * (k + 1) for k in range(8)]
CROSS = 49152
LAZY = [32768, 32768]
ITERATIONS = 12
WARMUP = 3


class CheckError(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise CheckError("%s: got %r, expected %r" % (what, got, want))


def run(preload, argv, env_extra, tmp):
    env = dict(os.environ)
    env.update({"LD_PRELOAD": preload, "OPTMEM_MODE": "trace",
                "OPTMEM_REPORT": os.path.join(tmp, "report_%p.json")})
    env.update(env_extra)
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=170)
    if proc.returncode != 0:
        raise CheckError("%s exited with %d:\n%s" % (argv, proc.returncode, proc.stderr[-3000:]))
    reports = {}
    for path in glob.glob(os.path.join(tmp, "report_*.json")):
        with open(path) as f:
            r = json.load(f)
        report_schema.validate(r)
        reports[r["process"]["pid"]] = report_schema.expand(r)
    if glob.glob(os.path.join(tmp, "*.tmp.*")):
        raise CheckError("a temporary report file was left behind")
    return proc, reports


def site_by_function(report, name):
    """The call sites whose innermost frame is in function name, merged: the compiler may
    unroll a loop around the call into several call sites of one function."""
    found = [s for s in report["sites"] if s["frames"] and s["frames"][0]["function"] == name]
    if not found:
        raise CheckError("no call site has %s as its innermost frame" % name)
    cats = {s["category"] for s in found}
    if len(cats) != 1:
        raise CheckError("the call sites of %s differ in category: %r" % (name, cats))
    merged = {"ids": {s["id"] for s in found}, "category": cats.pop(),
              "count": sum(s["count"] for s in found),
              "total_bytes": sum(s["total_bytes"] for s in found)}
    lts = [s["lifetime_requests"] for s in found if s["lifetime_requests"]]
    merged["lifetime_requests"] = {"min": min(x["min"] for x in lts),
                                   "max": max(x["max"] for x in lts)} if lts else None
    return merged


def check_train_loop(args, tmp):
    argv = [args.program, str(ITERATIONS)]
    env = {}
    if args.mode == "marked":
        argv.append("--mark")
        env["OPTMEM_WARMUP"] = str(WARMUP)
    _, reports = run(args.preload, argv, env, tmp)
    expect("reports", len(reports), 1)
    r = next(iter(reports.values()))
    n = ITERATIONS
    first_iter = len(TEMPS) + 1 + len(LAZY)  # iteration 0 creates the lazy state
    period = len(TEMPS) + 1
    prefix = len(PERSIST) + 1
    requests = prefix + first_iter + period * (n - 1)
    # starts[k]: the first request of iteration k (k >= 1)
    start = [prefix] + [prefix + first_iter + period * (k - 1) for k in range(1, n + 1)]
    expect("managed_requests", r["counters"]["managed_requests"], requests)
    expect("managed_frees", r["counters"]["managed_frees"], 1 + len(TEMPS) * n + (n - 1))
    persistent = sum(PERSIST) + sum(LAZY)
    expect("live_bytes", r["counters"]["live_bytes"], persistent + CROSS)
    expect("lower_bound_bytes", r["lower_bound_bytes"], persistent + sum(TEMPS) + CROSS)
    it = r["iterations"]
    expect("found", it["found"], True)
    expect("period_requests", it["period_requests"], period)
    if args.mode == "auto":
        expect("method", it["method"], "auto")
        expect("first_steady_request", it["first_steady_request"], start[1])
        expect("starts", it["starts"], start[1:n])
        expect("detector period", it["detector"]["thread_period_requests"], period)
        last = [start[n - 2], start[n - 1]]
    else:
        expect("method", it["method"], "marked")
        expect("marks", it["marks"]["requests"], start[1:n + 1])
        expect("first_steady_request", it["first_steady_request"], start[WARMUP])
        expect("starts", it["starts"], start[WARMUP:n + 1])
        last = [start[n - 1], start[n]]
    expect("sample.first_request", r["sample"]["first_request"], it["first_steady_request"])
    cat = r["categories"]
    expect("categories.iteration", cat["iteration"], last)
    expect("categories.temporary", cat["temporary"], {"bytes": sum(TEMPS), "blocks": len(TEMPS)})
    expect("categories.per_iteration", cat["per_iteration"], {"bytes": CROSS, "blocks": 1})
    expect("categories.persistent", cat["persistent"],
           {"bytes": persistent, "blocks": len(PERSIST) + len(LAZY)})
    expect("categories.lower_bound_bytes", cat["lower_bound_bytes"],
           persistent + sum(TEMPS) + CROSS)

    sites = {name: site_by_function(r, name)
             for name in ("site_persist", "site_setup", "site_temp", "site_cross", "site_lazy")}
    expect("call sites", sum(len(s["ids"]) for s in sites.values()), len(r["sites"]))
    expect("persist", (sites["site_persist"]["count"], sites["site_persist"]["total_bytes"],
                       sites["site_persist"]["category"]), (3, sum(PERSIST), "persistent"))
    expect("setup", (sites["site_setup"]["count"], sites["site_setup"]["category"]), (1, None))
    expect("temp", (sites["site_temp"]["count"], sites["site_temp"]["total_bytes"],
                    sites["site_temp"]["category"]), (len(TEMPS) * n, sum(TEMPS) * n, "temporary"))
    expect("cross", (sites["site_cross"]["count"], sites["site_cross"]["category"]),
           (n, "per_iteration"))
    expect("lazy", (sites["site_lazy"]["count"], sites["site_lazy"]["category"]),
           (2, "persistent"))
    # Lifetimes in requests: the last temporary lives 2 (itself and the arc), the first one
    # of iteration 0 lives the whole first iteration; the arc lives 2, or 4 in iteration 0.
    lt = sites["site_temp"]["lifetime_requests"]
    expect("temp lifetimes", (lt["min"], lt["max"]), (2, first_iter))
    lt = sites["site_cross"]["lifetime_requests"]
    expect("cross lifetimes", (lt["min"], lt["max"]), (2, 2 + len(LAZY)))
    # The sample: one steady iteration, request by request.
    s0 = it["first_steady_request"]
    rec = r["sample"]["lifetimes"][start[n - 2] - s0:start[n - 1] - s0]
    want = [["site_temp", TEMPS[k], start[n - 2] + k, start[n - 2] + period]
            for k in range(len(TEMPS))]
    want.append(["site_cross", CROSS, start[n - 2] + period - 1, start[n - 2] + period + 1])
    name_of = {i: name for name, s in sites.items() for i in s["ids"]}
    expect("sample of iteration %d" % (n - 2),
           [[name_of[x[0]]] + x[1:4] for x in rec], want)
    print("train_loop (%s): period %d, first steady request %d, lower bound %d" %
          (args.mode, period, s0, r["lower_bound_bytes"]))


def check_fork(args, tmp):
    dump = os.path.join(tmp, "dump.json")
    proc, reports = run(args.preload, [args.program, dump], {}, tmp)
    expect("reports (parent and child)", len(reports), 2)
    with open(dump) as f:
        report_schema.validate(json.load(f))
    parent = [r for r in reports.values() if r["process"]["forked_at_request"] is None]
    child = [r for r in reports.values() if r["process"]["forked_at_request"] is not None]
    expect("one parent, one child", (len(parent), len(child)), (1, 1))
    parent, child = parent[0], child[0]
    expect("child's ppid", child["process"]["ppid"], parent["process"]["pid"])
    expect("child forked at", child["process"]["forked_at_request"], 5)
    expect("child requests", child["counters"]["managed_requests"], 7)
    expect("child frees", child["counters"]["managed_frees"], 8)
    expect("child live", child["counters"]["live_blocks"], 4)
    expect("parent requests", parent["counters"]["managed_requests"], 9)
    expect("parent frees", parent["counters"]["managed_frees"], 9)
    expect("parent live", parent["counters"]["live_blocks"], 0)
    expect("child sites", site_by_function(child, "site_child")["count"], 7)
    expect("parent sites", site_by_function(parent, "site_parent")["count"], 9)
    print("fork: parent %d and child %d wrote their own reports" %
          (parent["process"]["pid"], child["process"]["pid"]))


def check_workload(args, tmp):
    script = os.path.abspath(args.program)
    _, reports = run(args.preload, [sys.executable, script, "--steps", "12"],
                     {"OPTMEM_WORKLOAD_MARK_STEPS": "1"}, tmp)
    mine = [r for r in reports.values() if script in r["process"]["argv"]]
    expect("reports of the workload process", len(mine), 1)
    r = mine[0]
    it = r["iterations"]
    marks = it["marks"]["requests"]
    expect("marks", len(marks), 12)
    # The truth: managed requests between consecutive optmem_step() calls, counted by the
    # tracer independently of detection; steady steps all make the same number.
    diffs = [b - a for a, b in zip(marks, marks[1:])]
    steady = diffs[-6:]
    if len(set(steady)) != 1:
        raise CheckError("steady steps differ in managed requests: %r" % diffs)
    expect("found", it["found"], True)
    expect("period_requests", it["period_requests"], steady[0])
    if not it["first_steady_request"] <= marks[-6]:
        raise CheckError("the steady iterations start late: %d" % it["first_steady_request"])
    named = [f for s in r["sites"] for f in s["frames"]
             if f["function"] and f["module"] and
             ("libtorch" in f["module"] or "python" in f["module"])]
    if not named:
        raise CheckError("no frame is symbolized in libtorch or python")
    print("%s: period %d requests (marks: %r), %d call sites, lower bound %d" %
          (os.path.basename(script), it["period_requests"], diffs, len(r["sites"]),
           r["lower_bound_bytes"]))


def check_varying(args, tmp):
    _, reports = run(args.preload, [args.program], {}, tmp)
    expect("reports", len(reports), 1)
    r = next(iter(reports.values()))
    sizes = {}
    for s in r["sites"]:
        for size in {s["min_size"], s["max_size"]}:
            sizes.setdefault(size, []).append([f["function"] for f in s["frames"]][:3])
    # After the walk that saw the frame's second size, a request's true stack, not one taken
    # by the first size's distance (which ends at the outermost frame).
    want = {65536: "leaf", 2 * 65536: "other_leaf", 3 * 65536: "leaf", 4 * 65536: "leaf",
            5 * 65536: "leaf"}
    for size, inner in want.items():
        for stack in sizes.get(size) or [None]:
            expect("innermost frames of the %d-byte request" % size, stack, [inner, "vary", "main"])
    print("varying: %d call sites" % len(r["sites"]))


def check_shared_slot(args, tmp):
    _, reports = run(args.preload, [args.program], {}, tmp)
    expect("reports", len(reports), 1)
    r = next(iter(reports.values()))
    want = {65536: "first", 2 * 65536: "second"}
    for s in r["sites"]:
        inner = [f["function"] for f in s["frames"]][:3]
        for size in {s["min_size"], s["max_size"]}:
            if size in want:
                expect("innermost frames of the %d-byte requests" % size, inner,
                       ["leaf", want[size], "main"])
    counts = {size: sum(s["count"] for s in r["sites"] if s["min_size"] == size)
              for size in want}
    expect("requests by size", counts, {65536: 16, 2 * 65536: 16})
    print("shared-slot: %d call sites" % len(r["sites"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("what", choices=("train-loop", "fork", "varying", "shared-slot", "workload"))
    ap.add_argument("program")
    ap.add_argument("--mode", choices=("auto", "marked"), default="auto")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            {"train-loop": check_train_loop, "fork": check_fork, "varying": check_varying,
             "shared-slot": check_shared_slot, "workload": check_workload}[args.what](args, tmp)
        except (CheckError, report_schema.SchemaError) as e:
            print("FAIL: %s" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
