"""Checks that a plan's pages are laid out a slice a call: when the CNN's plan is made,
over 100 MiB of free pages move onto its slots' or go back, and no call moves or gives
back more than OM_LAYOUT_SLICE bytes of them (preload/pool_internal.h), so the layout is
spread over several calls instead of holding the one that installed the plan; and the
layout ends, within as many calls as the arena has windows below its top.

Usage: plan_layout.py --preload LIBOPTMEM. Exit status 0 on success.
"""

import argparse
import sys

from plan_run import exit_status, run_plan_mode

LAYOUT_SLICE = 2 << 20  # OM_LAYOUT_SLICE
# The CNN's layout is over 100 MiB (its plan serves from step 3 on); numpy_mlp's is a few MiB,
# and its second plan's layout ends at an arena top that is not on a page's edge.
RUNS = (("cnn_bn_adam", 5, True), ("numpy_mlp", 16, False))


def check(workload, v, spread):
    """Failures of the layout counters of one run's report."""
    if "layout_calls" not in v:
        return ["%s: the report has no layout counters" % workload]
    print("plan_layout: %s: %d plan(s); the last one's pages: %.1f MiB moved or given back "
          "over %d calls, at most %.1f MiB in one (%d us)"
          % (workload, v["plans"], v["layout_bytes"] / 2**20, v["layout_calls"],
             v["layout_max_bytes"] / 2**20, v["layout_max_us"]))
    failures = []
    if v["plans"] < 1 or not v["layout_calls"]:
        failures.append("no plan was laid out: nothing is checked")
    if spread and v["layout_bytes"] <= LAYOUT_SLICE:
        failures.append("no plan laid out more than one slice of pages: nothing is checked")
    if v["layout_max_bytes"] > LAYOUT_SLICE:
        failures.append("one call moved or gave back %d bytes > %d"
                        % (v["layout_max_bytes"], LAYOUT_SLICE))
    if v["layout_calls"] * LAYOUT_SLICE < v["layout_bytes"]:
        failures.append("%d bytes laid out over %d calls" % (v["layout_bytes"], v["layout_calls"]))
    # Each call after the first starts at least a window above the last one's start, and the
    # walk ends at the arena's top: a walk that stops advancing goes on for every call.
    most = v["arena_top_bytes"] // LAYOUT_SLICE + 2
    if v["layout_calls"] > most:
        failures.append("the layout went on for %d calls, more than the %d windows below the "
                        "arena's top" % (v["layout_calls"], most))
    return ["%s: %s" % (workload, f) for f in failures]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()
    failures = []
    for workload, steps, spread in RUNS:
        _, report, _ = run_plan_mode("plan_layout", args.preload, workload, steps)
        failures += check(workload, report["serving"], spread)
    return exit_status("plan_layout", failures)


if __name__ == "__main__":
    sys.exit(main())
