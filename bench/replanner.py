#!/usr/bin/python3
"""Benchmark of the replanner: `optmem plan` over the bundled lifetime sets, a generated
20,000-buffer training-like trace, two recorded transformer iterations (cyclic, 6491 and
12635 arcs, tests/replanner/data), the instances planned inside programs that
tests/replanner/data/inprog-*.csv keep (OPTMEM_PLAN_DUMP: cyclic, each planned with the
budget its program gave it) and hard generated instances (tests/replanner/
gen_instances.py: perfect packings of 220 to 600 buffers, whose optimum is LB, a cyclic one
and two crowded aligned ones, of 2000 and 50,000 buffers, seeds from 1000, which the tests do
not use); prints one table
(instance, buffers, LB, best known, greedy by size / LB, ours / LB, the proven bound / LB
(above 1 where no plan reaches LB: that much of the gap is the bound's), time, the CPU time
of the whole `optmem plan` process (reading the file included), the process's peak RSS, and
ours / LB, the time and the CPU time with the in-process default budget of 20 ms). A
figure marked c: the budget ran out before greedy by size finished, so its figure is the
first plan's (greedy by size's placed blocks and the rest on top). With --repeat N each
budget's figures are those of the run with the median peak of N."""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# gen_instances.py (kind, buffers, seed); the tests use seeds below 100.
GENERATED = [("perfect", 220, 1001), ("perfect", 300, 1002), ("perfect", 400, 1003),
             ("perfect", 500, 1004), ("perfect", 600, 1005), ("cyclic", 400, 1006),
             ("crowded", 2000, 1007), ("crowded", 50000, 1008), ("loop", 120, 1009),
             ("loop", 1000, 1010)]

# From shared/bench/lifetimes/README.md: the smallest peak any solver has been seen to reach.
BEST_KNOWN = {
    "minimalloc-A.csv": 1048576, "minimalloc-B.csv": 1048576, "minimalloc-C.csv": 1039360,
    "minimalloc-D.csv": 1040384, "minimalloc-E.csv": 1048576, "minimalloc-F.csv": 1048576,
    "minimalloc-G.csv": 1048576, "minimalloc-H.csv": 1048576, "minimalloc-I.csv": 1048576,
    "minimalloc-J.csv": 1038336, "minimalloc-K.csv": 1048576,
    "omnimalloc-small-a.6.csv": 6, "omnimalloc-small-b.6.csv": 6, "omnimalloc-small-c.8.csv": 8,
}


def gen_training_trace(path, n_target=20000, seed=1):
    """A training iteration: forward activations kept for backward, short-lived
    temporaries, input gradients passed down, weight gradients kept until the optimizer
    step. Sizes follow stages of a convolutional net (shrinking maps, growing channels)."""
    rng = random.Random(seed)
    rows = []
    t = 0

    def add(lo, up, size):
        rows.append((len(rows), lo, up, size))

    layers = n_target // 7
    acts = []
    stage_sizes = [4 << 20, 2 << 20, 1 << 20, 512 << 10, 256 << 10]
    for i in range(layers):
        base = stage_sizes[min(len(stage_sizes) - 1, i * len(stage_sizes) // layers)]
        act = base * rng.choice([1, 1, 2, 4]) // rng.choice([1, 2])
        acts.append((t, act))
        for _ in range(2):  # forward temporaries (im2col, workspace)
            add(t, t + rng.randint(1, 3), rng.randrange(256, base, 256))
        t += 1
    grad_out = None
    wgrads = []
    for i in reversed(range(layers)):
        born, act = acts[i]
        g = act  # gradient of this layer's input: same shape as its activation
        g_born = t
        for _ in range(2):  # backward temporaries
            add(t, t + rng.randint(1, 3), rng.randrange(256, max(512, act // 2), 256))
        wgrads.append((t, rng.randrange(256, 64 << 10, 256)))
        t += 1
        add(born, t, act)  # the activation dies once its backward ran
        if grad_out is not None:
            add(grad_out[0], t, grad_out[1])
        grad_out = (g_born, g)
    t += 1
    add(grad_out[0], t, grad_out[1])
    for born, size in wgrads:  # optimizer step consumes the weight gradients
        add(born, t + 1, size)
    with open(path, "w") as f:
        f.write("id,lower,upper,size\n")
        for r in rows:
            f.write("%d,%d,%d,%d\n" % r)
    return len(rows)


def run_plan(optmem, path, budget_ms, period=None):
    """Plans one file (period None: the file's own); its figures, with the peak RSS of
    `optmem plan` (CSV reading included) from the child's own rusage."""
    cmd = [optmem, "plan", path, "--budget-ms", str(budget_ms)]
    if period is not None:
        cmd += ["--period", str(period)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        out, err = proc.stdout.read(), proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit("optmem plan %s failed: %s" % (path, err.strip()))
    val = {"MiB": usage.ru_maxrss / 1024, "cpu": (usage.ru_utime + usage.ru_stime) * 1000}
    for key in ("buffers", "lower bound", "peak", "greedy", "proven"):
        val[key] = int(re.search(r"^%s:\s+(\d+)" % key, out, re.M).group(1))
    # the budget ran out before greedy by size finished: its figure is the first plan's
    val["cut"] = "c" if re.search(r"^greedy:.*\bcut\b", out, re.M) else ""
    val["ms"] = float(re.search(r"^time:\s+([\d.]+) ms", out, re.M).group(1))
    return val


def run_median(optmem, path, budget_ms, period, repeat):
    """run_plan `repeat` times: the run whose peak is the median (then by time), so that one
    figure of a budget the load decides is not the luck of one run."""
    runs = sorted((run_plan(optmem, path, budget_ms, period) for _ in range(repeat)),
                  key=lambda v: (v["peak"], v["ms"]))
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--optmem", default=None, help="the optmem binary")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "bench", "lifetimes"))
    ap.add_argument("--budget-ms", type=int, default=1000, help="budget per bundled instance")
    ap.add_argument("--trace-budget-ms", type=int, default=100, help="budget for the trace")
    ap.add_argument("--step-budget-ms", type=int, default=200,
                    help="budget for the transformer iterations (plan mode's least, default "
                         "%(default)s)")
    ap.add_argument("--short-budget-ms", type=int, default=20,
                    help="second, short budget for every instance (0: none)")
    ap.add_argument("--only", default=None, metavar="SUBSTRING",
                    help="only the instances whose name contains this")
    ap.add_argument("--no-generated", action="store_true",
                    help="leave out the gen_instances.py instances")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="plan each instance N times at each budget and show the run with the "
                         "median peak (default %(default)s)")
    a = ap.parse_args()
    if a.repeat < 1:
        sys.exit("--repeat takes 1 or more")
    optmem = a.optmem
    if not optmem:
        for cand in ("build/tools/optmem", "build-rp/tools/optmem"):
            if os.access(os.path.join(ROOT, cand), os.X_OK):
                optmem = os.path.join(ROOT, cand)
                break
    if not optmem:
        sys.exit("no optmem binary found: build it or pass --optmem")

    jobs = [(f, os.path.join(a.data, f), a.budget_ms, 0) for f in sorted(os.listdir(a.data))
            if f.endswith(".csv")]
    data = os.path.join(ROOT, "tests", "replanner", "data")
    for f in sorted(os.listdir(data)):
        if f.startswith("inprog-") and f.endswith(".csv"):
            with open(os.path.join(data, f)) as fh:
                m = re.search(r"for up to (\d+) ms", fh.readline())
            budget = int(m.group(1)) if m else a.step_budget_ms
            jobs.append((f[:-4] + " (%d ms)" % budget, os.path.join(data, f), budget, None))
    tmp = tempfile.mkdtemp(prefix="om_rp_bench_")
    trace = os.path.join(tmp, "training-20k.csv")
    gen_training_trace(trace)
    jobs.append(("generated training-20k (seed 1)", trace, a.trace_budget_ms, 0))
    for batch, period in ((32, 6491), (64, 12635)):
        name = "transformer-b%d-step" % batch
        jobs.append((name + " (cyclic)",
                     os.path.join(ROOT, "tests", "replanner", "data", name + ".csv"),
                     a.step_budget_ms, period))

    generated = []
    if not a.no_generated:
        gen = os.path.join(ROOT, "tests", "replanner", "gen_instances.py")
        for kind, n, seed in GENERATED:
            path = os.path.join(tmp, "%s-%d-%d.csv" % (kind, n, seed))
            meta = json.loads(subprocess.run([sys.executable, gen, kind, "--n", str(n), "--seed",
                                              str(seed), "-o", path], check=True,
                                             capture_output=True, text=True).stdout)
            name = "gen %s n=%d seed=%d" % (kind, n, seed)
            if meta["optimum"] is not None:
                BEST_KNOWN[name] = meta["optimum"]
            jobs.append((name, path, a.budget_ms, meta["period"]))
            generated.append(path)

    fmt = "%-32s %8s %13s %12s %10s %8s %9s %9s %7s %7s %10s %9s %9s"
    short = "LB@%dms" % a.short_budget_ms if a.short_budget_ms else ""
    short_ms = "ms@%dms" % a.short_budget_ms if a.short_budget_ms else ""
    short_cpu = "cpu@%dms" % a.short_budget_ms if a.short_budget_ms else ""
    print(fmt % ("instance", "buffers", "lower bound", "best known", "greedy/LB", "ours/LB",
                 "proven/LB", "time ms", "cpu ms", "MiB", short, short_ms, short_cpu))
    for name, path, budget, period in jobs:
        if a.only and a.only not in name:
            continue
        v = run_median(optmem, path, budget, period, a.repeat)
        best = BEST_KNOWN.get(name)
        ratio = ms = cpu = ""
        if a.short_budget_ms:
            w = run_median(optmem, path, a.short_budget_ms, period, a.repeat)
            ratio = "%.4f%s" % (w["peak"] / v["lower bound"], w["cut"])
            ms = "%.1f" % w["ms"]
            cpu = "%.0f" % w["cpu"]
        print(fmt % (name, v["buffers"], v["lower bound"], best if best else "-",
                     "%.4f%s" % (v["greedy"] / v["lower bound"], v["cut"]),
                     "%.4f" % (v["peak"] / v["lower bound"]),
                     "%.4f" % (v["proven"] / v["lower bound"]), "%.1f" % v["ms"],
                     "%.0f" % v["cpu"], "%.1f" % v["MiB"], ratio, ms, cpu), flush=True)
    for path in generated + [trace]:
        os.remove(path)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
