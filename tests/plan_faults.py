"""Checks that a plan's first served iteration finds its pages resident: when the plan is
made, the free pages warm-up leaves outside its slots move onto the slots' pages that are
not resident, instead of going back to the kernel while those fault in. The transformer's
plan lies above every live block, on pages warm-up never touched, so without the moves its
first served step takes about 12 thousand page faults.

Usage: plan_faults.py --preload LIBOPTMEM. Exit status 0 on success.
"""

import argparse
import sys

from plan_run import exit_status, run_plan_mode

STEPS = 8  # the workload counts faults from step 3 on: the plan's first served step and 4 more
# Measured over steps 3 to 7 (2026-11-22): about 110 faults a step with the moves (398 in
# the first served step, 20 to 46 after it), about 2400 without them (11859 in the first).
MAX_FAULTS_PER_STEP = 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()
    result, report, _ = run_plan_mode("plan_faults", args.preload, "transformer_adamw", STEPS)
    faults, serving = result["minflt_per_steady_step"], report["serving"]
    print("plan_faults: %d plan(s), %.1f MiB of pages moved, %.0f page faults a step after "
          "warm-up" % (serving["plans"], serving["moved_bytes"] / 2**20, faults))
    failures = []
    if serving["plans"] < 1:
        failures.append("no plan was made: nothing is checked")
    if serving["moved_bytes"] == 0:
        failures.append("no page was moved")
    if faults > MAX_FAULTS_PER_STEP:
        failures.append("%.0f page faults a step > %d" % (faults, MAX_FAULTS_PER_STEP))
    return exit_status("plan_faults", failures)


if __name__ == "__main__":
    sys.exit(main())
