"""OptNet-style table: torchvision AlexNet, VGG-11, GoogLeNet, ResNet-18 (inference and training) under glibc, the best peer per row, and optmem (plain and saved plan)."""

import argparse
import signal
import sys
import tempfile

import peers

MODELS = ("alexnet", "vgg11", "googlenet", "resnet18")
MODES = ("infer", "train")
# glibc, every peer (the best one is chosen per row after the runs), optmem planned
# live and from a saved plan.
ALLOCATORS = ("glibc",) + peers.PEERS + ("optmem", "optmem-saved")


def parse_args():
    """Command line of the driver."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default=",".join(MODELS), help="default %(default)s")
    p.add_argument("--modes", default=",".join(MODES), help="default %(default)s")
    p.add_argument("--steps", type=int, default=None,
                   help="steps per run (default: the workload's, 10)")
    peers.add_common_args(p)
    p.set_defaults(allocators=",".join(ALLOCATORS))
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def workloads_for(models, modes):
    """One peers.py workload spec per (model, mode) of tests/workloads/torchvision_models.py."""
    specs = []
    for model in models:
        if model not in MODELS:
            raise SystemExit("unknown model %r (known: %s)" % (model, ", ".join(MODELS)))
        for mode in modes:
            if mode not in MODES:
                raise SystemExit("unknown mode %r (known: %s)" % (mode, ", ".join(MODES)))
            specs.append({"name": "%s/%s" % (model, mode), "kind": "python",
                          "script": "torchvision_models.py",
                          "args": ["--model", model, "--mode", mode], "steps": None})
    return specs


def saving(mine, other):
    """Share of other's bytes that mine saves (0.25: a quarter less), or None."""
    return 1.0 - mine / other if mine is not None and other else None


def optnet_rows(rows, records):
    """One row per workload: glibc, the best peer by training-driven peak, optmem."""
    out = []
    for w in dict.fromkeys(r["workload"] for r in rows):
        by = {r["allocator"]: r for r in rows if r["workload"] == w}
        peak = {n: r["training_peak_bytes"] for n, r in by.items()}
        candidates = [n for n in peers.PEERS if peak.get(n) is not None]
        best = min(candidates, key=lambda n: peak[n]) if candidates else None
        glibc = peak.get("glibc")
        ok = [x for x in records if x["workload"] == w and not x["error"]]
        first = ok[0]["result"] if ok else {}
        row = {"workload": w, "input_size": first.get("input_size"), "batch": first.get("batch"),
               "glibc_bytes": glibc, "best_peer": best, "best_peer_bytes": peak.get(best)}
        for name in ("optmem", "optmem-saved"):
            if name in by:
                mine = peak.get(name)
                row[name] = {"bytes": mine, "vs_glibc": saving(mine, glibc),
                             "vs_best_peer": saving(mine, peak.get(best)),
                             "served_share": by[name]["served_share"],
                             "output": by[name]["output_vs_reference"],
                             "note": peers.allocator_cell(by[name])[len(name):].strip()}
        out.append(row)
    return out


def markdown(rows, shown):
    """The OptNet-style table."""
    mib = peers.MIB
    head = ["model", "mode", "input, batch", "glibc (MiB)", "best peer (MiB)"]
    for name in shown:
        head += ["%s (MiB)" % name, "%s saving vs glibc" % name, "%s saving vs best peer" % name,
                 "%s served from plan" % name, "%s output vs glibc" % name]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        model, mode = r["workload"].split("/")
        cells = [model, mode, "%s×%s, %s" % (r["input_size"], r["input_size"], r["batch"]),
                 peers.fmt(r["glibc_bytes"], ".1f", mib),
                 "%s %s" % (r["best_peer"] or "–", peers.fmt(r["best_peer_bytes"], ".1f", mib))]
        for name in shown:
            o = r.get(name) or {}
            cells += [peers.fmt(o.get("bytes"), ".1f", mib) + (" " + o["note"] if o.get("note") else ""),
                      pct(o.get("vs_glibc")), pct(o.get("vs_best_peer")),
                      peers.fmt(o.get("served_share"), ".3f"), o.get("output", "–")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pct(x):
    """A saving as a signed percentage (negative: more memory)."""
    return "–" if x is None else "%+.0f%%" % (100 * x)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    workloads = workloads_for(args.models.split(","), args.modes.split(","))
    allocs = peers.select_allocators(args.allocators.split(","), args)
    peers.log("running %d model/mode pair(s) x %d allocator(s) x %d run(s), interleaved"
              % (len(workloads), len(allocs), args.runs))
    with tempfile.TemporaryDirectory(prefix="optmem-optnet-") as tmpdir:
        records = peers.run_all(workloads, allocs, args, tmpdir)
    rows = peers.summarize(records, workloads, allocs)
    table = optnet_rows(rows, records)
    shown = [n for n in ("optmem", "optmem-saved") if any(a["name"] == n for a in allocs)]
    print("Training-driven peak (peak RSS minus RSS after imports), medians of %d interleaved "
          "run(s), %s steps, %d threads; best peer = lowest median among %s, per row.\n"
          % (args.runs, args.steps or "default", args.threads, ", ".join(peers.PEERS)))
    print(markdown(table, shown))
    print("\nAll allocators, every column:\n")
    print(peers.markdown_table(rows))
    print("\n" + peers.busy_note(records))
    if args.csv:
        peers.write_csv(args.csv, rows)
    if args.json:
        peers.write_json(args.json, args, allocs, workloads, records, rows)
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
