"""Checks that a plan's pages are laid out a slice a call: when the CNN's plan is made,
over 100 MiB of free pages move onto its slots' or go back, and no call moves or gives
back more than OM_LAYOUT_SLICE bytes of them (preload/pool_internal.h), so the layout is
spread over several calls instead of holding the one that installed the plan.

Usage: plan_layout.py --preload LIBOPTMEM. Exit status 0 on success.
"""

import argparse
import sys

from plan_run import exit_status, run_plan_mode

LAYOUT_SLICE = 8 << 20  # OM_LAYOUT_SLICE
STEPS = 5  # the plan serves from step 3 on


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()
    failures = []
    _, report, _ = run_plan_mode("plan_layout", args.preload, "cnn_bn_adam", STEPS)
    v = report["serving"]
    if "layout_calls" not in v:
        return exit_status("plan_layout", ["the report has no layout counters"])
    print("plan_layout: %d plan(s); the last one's pages: %.1f MiB moved or given back over "
          "%d calls, at most %.1f MiB in one (%d us)"
          % (v["plans"], v["layout_bytes"] / 2**20, v["layout_calls"],
             v["layout_max_bytes"] / 2**20, v["layout_max_us"]))
    if v["plans"] < 1 or v["layout_bytes"] <= LAYOUT_SLICE:
        failures.append("no plan laid out more than one slice of pages: nothing is checked")
    if v["layout_max_bytes"] > LAYOUT_SLICE:
        failures.append("one call moved or gave back %d bytes > %d"
                        % (v["layout_max_bytes"], LAYOUT_SLICE))
    if v["layout_calls"] * LAYOUT_SLICE < v["layout_bytes"]:
        failures.append("%d bytes laid out over %d calls" % (v["layout_bytes"], v["layout_calls"]))
    return exit_status("plan_layout", failures)


if __name__ == "__main__":
    sys.exit(main())
