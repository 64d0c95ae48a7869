"""Checks that a saved plan's process does not peak again at its exit: the model's weights,
placed by the plan's prologue and freed at teardown, must give their pages back while the
libraries' destructors touch their code pages (4 MiB on the CNN), or the whole run's peak
exceeds the training's.

Usage: saved_plan_exit.py --preload LIBOPTMEM. Exit status 0 on success.
"""

import argparse
import os
import sys
import tempfile

from plan_run import exit_status, run_plan_mode

STEPS = 12
# Measured (2026-11-22): the whole run peaks 0.1 MiB below the training's VmHWM with the
# weights' pages given back, 3.9 MiB above it (8 MiB by GNU time's count) when they were kept.
MAX_EXCESS = 1 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.bin")
        run_plan_mode("saved_plan_exit", args.preload, "cnn_bn_adam", STEPS, plan)
        result, report, whole_run = run_plan_mode("saved_plan_exit", args.preload,
                                                  "cnn_bn_adam", STEPS, plan)
    training = result["peak_rss_bytes"]
    print("saved_plan_exit: peak RSS %.1f MiB by the last step, %.1f MiB over the whole run"
          % (training / 2**20, whole_run / 2**20))
    failures = []
    if report["serving"]["saved_plan"] != 1:
        failures.append("the saved plan was not served: nothing is checked")
    if whole_run > training + MAX_EXCESS:
        failures.append("the whole run peaked %.1f MiB above the training"
                        % ((whole_run - training) / 2**20))
    return exit_status("saved_plan_exit", failures)


if __name__ == "__main__":
    sys.exit(main())
