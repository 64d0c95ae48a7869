"""The inferred breakdown against a bundled workload's truth (tests/report/CMakeLists.txt).

Usage: check_breakdown.py --optmem CLI WORKLOAD.py [--steps N] [--keep-grads]
Runs the workload under `optmem run --mode trace` through breakdown_truth.py, which prints the
model's and the optimizer's true sizes, and checks `optmem report --format json`'s breakdown:
parameters and gradients (the most live in the iteration) within TOLERANCE of the parameter
bytes, optimizer state within TOLERANCE of the optimizer's state bytes. With --keep-grads the
workload's zero_grad keeps the gradients (set_to_none=False): the breakdown must say so and
find them, live throughout the iteration, among the blocks born before it. The tolerance covers
the tensors the tracer does not see (under OPTMEM_MIN_BYTES, 4096 by default: the small
parameters, Adam's step counters), a fraction of a percent on the bundled models."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from checks import expect, run_main

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 0.01  # of the true bytes


def near(got, want, what):
    expect(want > 0, "%s: the truth is 0 bytes" % what)
    err = abs(got - want) / want
    expect(err <= TOLERANCE, "%s: inferred %d bytes, true %d (off by %.2f %%, tolerance %.0f %%)"
           % (what, got, want, 100 * err, 100 * TOLERANCE))
    print("ok %s: inferred %d bytes, true %d (off by %.2f %%)" % (what, got, want, 100 * err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optmem", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--keep-grads", action="store_true")
    ap.add_argument("workload")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        proc = subprocess.run([args.optmem, "run", "--mode", "trace", "-o", path, "--",
                               sys.executable, os.path.join(HERE, "breakdown_truth.py")] +
                              (["--keep-grads"] if args.keep_grads else []) + [
                               args.workload, "--steps", str(args.steps), "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
        expect(proc.returncode == 0, "workload: exit %d: %s" % (proc.returncode,
                                                               proc.stderr.decode()[-2000:]))
        truth = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        out = subprocess.run([args.optmem, "report", path, "--format", "json"],
                             stdout=subprocess.PIPE, check=True, timeout=120).stdout
        bd = json.loads(out)["processes"][0]["breakdown"]
        text = subprocess.run([args.optmem, "report", path], stdout=subprocess.PIPE,
                              check=True, timeout=120).stdout.decode()
    print("truth:", json.dumps(truth))
    expect(bd["inferred"] is True and bd["found"] is True, "no breakdown: %s" % bd)
    cls = bd["classes"]
    near(cls["parameters"]["at_peak_bytes"], truth["parameter_bytes"], "parameters")
    near(cls["gradients"]["max_live_bytes"], truth["parameter_bytes"], "gradients")
    expect(bd["gradients_kept"] == args.keep_grads, "gradients_kept: %s" % bd["gradients_kept"])
    if args.keep_grads:
        near(cls["gradients"]["at_peak_bytes"], truth["parameter_bytes"], "gradients at the peak")
        expect(cls["gradients"]["requested_bytes"] == 0, "kept gradients requested in the "
               "iteration: %s" % cls["gradients"])
    else:
        near(cls["gradients"]["requested_bytes"], truth["parameter_bytes"],
             "gradients requested in the iteration")
    near(cls["optimizer_state"]["at_peak_bytes"], truth["optimizer_state_bytes"],
         "optimizer state")
    expect(cls["activations"]["max_live_bytes"] > 0, "no activations: %s" % cls)
    expect(sum(c["at_peak_bytes"] for c in cls.values()) == bd["peak_bytes"],
           "the classes do not add up to the iteration's peak: %s" % bd)
    expect("inferred" in text and "P parameters" in text, "the text lacks the breakdown:\n" + text)


if __name__ == "__main__":
    run_main(main)
