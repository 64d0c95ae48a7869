"""OPTMEM_PLAN_FILE end to end: a first run saves the plan, a second run serves it from the
first request with the same output; a corrupt plan file and another program's plan are
ignored with one warning line and the program runs as without them."""
import argparse
import json
import os
import sys
import tempfile

from run_serving import command, plain_env, run


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--other", required=True, help="another program, to test a foreign plan")
    ap.add_argument("--min-served", type=float, default=0.9,
                    help="share of all managed requests the saved plan must serve")
    ap.add_argument("--extra-first", action="store_true",
                    help="also serve the plan to a run with one more request first "
                    "(TRAIN_DRIFT_EXTRA_FIRST=1), which may cost that request's miss only, "
                    "and one saved so to a run without it, which may cost nothing")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = command(args)
    base = plain_env()
    rc, plain, _ = run(cmd, base)
    if rc != 0:
        fail("the program fails without optmem")

    with tempfile.TemporaryDirectory() as tmp:
        plan = f"{tmp}/plan.bin"

        def planned(n, program=cmd, extra_env=None):
            env = dict(base, LD_PRELOAD=args.preload, OPTMEM_MODE="plan", OPTMEM_VERIFY="1",
                       OPTMEM_LOG="info", OPTMEM_PLAN_FILE=plan, OPTMEM_REPORT=f"{tmp}/report{n}.json",
                       **(extra_env or {}))
            code, out, err = run(program, env)
            report = json.load(open(f"{tmp}/report{n}.json"))
            return code, out, err, report

        code, out, err, first = planned(1)
        if code != 0 or out != plain:
            fail(f"first run differs from the plain run:\n{err}")
        if not os.path.exists(plan) or "plan saved to" not in err:
            fail(f"no plan saved:\n{err}")
        code, out, err, second = planned(2)
        if code != 0 or out != plain:
            fail(f"second run differs from the plain run:\n{err}")
        serving = second["serving"]
        served = serving["served_from_plan"] / second["counters"]["managed_requests"]
        print(f"second run: {json.dumps(serving)}; served {served:.3f} of all requests; "
              f"arena top {serving['arena_top_bytes']} lower bound "
              f"{second['lower_bound_bytes']}")
        if serving["saved_plan"] != 1 or serving["plans"] != 0:
            fail("the second run did not serve the saved plan")
        if served < args.min_served:
            fail(f"served {served:.3f} < {args.min_served}")
        if serving["verify_violations"] or serving["invalid_frees"]:
            fail("verify violations")
        if args.extra_first:
            # The saved prologue then ends one request early by its count; its last request
            # must still find its slot, not miss and take the iteration's cursor with it.
            code, out, err, longer = planned(5, extra_env={"TRAIN_DRIFT_EXTRA_FIRST": "1"})
            misses = longer["serving"]["misses"]
            print(f"with one more request first: {misses} misses, {serving['misses']} without")
            if code != 0 or out != plain:
                fail(f"the run with one more request differs from the plain run:\n{err}")
            if longer["serving"]["saved_plan"] != 1 or misses > serving["misses"] + 1:
                fail(f"one more request first cost {misses - serving['misses']} misses")
            # The other way round: a plan saved by a run with that request, served to one
            # without it, whose prologue then ends a request before the saved one's count.
            os.remove(plan)
            code, out, err, _ = planned(6, extra_env={"TRAIN_DRIFT_EXTRA_FIRST": "1"})
            if code != 0 or out != plain or "plan saved to" not in err:
                fail(f"no plan saved by the run with one more request:\n{err}")
            code, out, err, shorter = planned(7)
            misses = shorter["serving"]["misses"]
            print(f"with one request fewer than the saved run: {misses} misses")
            if code != 0 or out != plain:
                fail(f"the run with one request fewer differs from the plain run:\n{err}")
            if shorter["serving"]["saved_plan"] != 1 or misses > serving["misses"]:
                fail(f"one request fewer cost {misses - serving['misses']} misses")

        with open(plan, "r+b") as f:  # flip bytes in the middle: the checksum catches it
            f.seek(os.path.getsize(plan) // 2)
            f.write(b"\xff\x00\xff\x00")
        code, out, err, third = planned(3)
        warnings = [line for line in err.splitlines() if "OPTMEM_PLAN_FILE" in line]
        if code != 0 or out != plain or len(warnings) != 1 or "corrupt" not in warnings[0]:
            fail(f"a corrupt plan was not ignored with one warning:\n{err}")
        if third["serving"]["saved_plan"] != 0:
            fail("a corrupt plan was served")

        code, _, err, _ = planned(4, [args.other])  # the plan is rewritten by run 3
        warnings = [line for line in err.splitlines() if "OPTMEM_PLAN_FILE" in line]
        if code != 0 or len(warnings) != 1 or "another program" not in warnings[0]:
            fail(f"another program's plan was not refused with one warning:\n{err}")
    print("ok: saved, served, corrupt and foreign plans handled")


if __name__ == "__main__":
    main()
