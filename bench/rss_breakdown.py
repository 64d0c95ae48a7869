"""What the training-driven RSS of the bundled workloads is made of, per allocator: how much
anonymous memory, code, read-only and writable file pages grew from right after the imports
to the last step, beside the training peak and optmem's lower bound (medians of runs)."""

import argparse
import statistics
import sys
import tempfile

import peers

KINDS = ("anonymous", "code", "file read-only", "file writable")
MIB = 1 << 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workloads", default=",".join(peers.DEFAULT_WORKLOADS),
                   help="comma-separated names of Python workloads (default %(default)s)")
    p.add_argument("--allocators", default="glibc,tcmalloc,optmem",
                   help="comma-separated names from bench/peers.py (default %(default)s)")
    p.add_argument("--runs", type=int, default=1, help="runs of each (default %(default)s)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: the table's)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-scale", type=int, default=1, help="multiply each batch by this")
    p.add_argument("--build-dir", default="build")
    p.add_argument("--optmem-lib", default=None)
    p.add_argument("--optmem-env", action="append", default=[], metavar="KEY=VAL")
    p.add_argument("--timeout", type=int, default=600)
    return p.parse_args()


def median_mib(values):
    values = [v for v in values if v is not None]
    return "%.1f" % (statistics.median(values) / MIB) if values else "–"


def main():
    args = parse_args()
    workloads = peers.select_workloads(args.workloads, args.build_dir)
    if any(w["kind"] != "python" for w in workloads):
        sys.exit("rss_breakdown: only the Python workloads report their mappings")
    allocs = peers.select_allocators(args.allocators.split(","), args)
    print("| workload | allocator | training peak (MiB) | lower bound (MiB) | "
          + " | ".join("%s growth (MiB)" % k for k in KINDS) + " |")
    print("|---|---|---|---|" + "---|" * len(KINDS))
    with tempfile.TemporaryDirectory() as tmp:
        plans = peers.prepare_saved_plans(workloads, allocs, args, tmp)
        for w in workloads:
            for a in allocs:
                alloc = dict(a, env=dict(a["env"], OPTMEM_WORKLOAD_RSS_BY_KIND="1"))
                recs = []
                for r in range(args.runs):
                    tag = "%s-%s-%d" % (w["name"], a["name"], r)
                    rec = peers.run_once(w, alloc, args, tmp, tag,
                                         peers.plan_for_run(plans, w, a, tmp, tag))
                    if rec["error"]:
                        sys.exit("rss_breakdown: %s under %s: %s" % (w["name"], a["name"], rec["error"]))
                    if a.get("saved_plan") and rec["saved_plan"] != 1:
                        sys.exit("rss_breakdown: %s under %s did not serve its saved plan"
                                 % (w["name"], a["name"]))
                    recs.append(rec)
                growth = [rec["result"]["rss_growth_by_kind_bytes"] for rec in recs]
                cells = [median_mib([rec["result"]["training_peak_bytes"] for rec in recs]),
                         median_mib([rec["lower_bound_bytes"] for rec in recs])]
                cells += [median_mib([g[k] for g in growth]) for k in KINDS]
                print("| %s | %s | %s |" % (w["name"], a["name"], " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
