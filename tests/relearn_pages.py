"""Checks that a plan dropped for a new one gives its pages back while the program is learnt
again: the numpy workload's first plan goes stale (Python specializes the loop's calls in
step 7) and is dropped; the blocks it placed are then freed while best fit learns the loop,
and their pages must go back like any other hole's, or the process grows by whole arrays.

Usage: relearn_pages.py --preload LIBOPTMEM. Exit status 0 on success.
"""

import argparse
import sys

from plan_run import exit_status, run_plan_mode

# Measured: 1.19 x the lower bound with the pages given back, 1.35 when the dropped plan's
# blocks kept theirs.
MAX_PEAK_RATIO = 1.25


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()
    result, r, _ = run_plan_mode("relearn_pages", args.preload, "numpy_mlp", 20)
    peak = result["training_peak_bytes"]
    serving, bound = r["serving"], r["lower_bound_bytes"]
    ratio = peak / bound
    print("relearn_pages: %d plans, %d replans, training peak %.1f MiB = %.2f x the bound"
          % (serving["plans"], serving["replans"], peak / 2**20, ratio))
    failures = []
    if serving["replans"] < 1:
        failures.append("no plan was dropped: nothing is checked")
    if ratio > MAX_PEAK_RATIO:
        failures.append("training peak %.2f x the bound > %.2f" % (ratio, MAX_PEAK_RATIO))
    return exit_status("relearn_pages", failures)


if __name__ == "__main__":
    sys.exit(main())
