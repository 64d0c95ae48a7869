"""Replays PyTorch memory snapshots on the fake CUDA runtime, plainly and under optmem (plan
mode, the device domain managed), and prints a markdown table of what the device held.

Usage: replay_table.py --build BUILD_DIR [--iterations N] [--mode sync|async|pluggable]
                       SNAPSHOT.pickle...

Per snapshot: the native peak PyTorch recorded, the lower bound (most bytes live at once) and
optmem plan's peak for the recorded window (optmem plan), the most the fake device held in
the plain replay (straight to the driver, no caching), and under optmem: the report's lower
bound (requests of OPTMEM_MIN_BYTES and more), the device's peak from iteration 3 (counted
from 0) on and over the last half of the iterations, the first iteration from which every
iteration's peak stays at the last one's, the served share over the whole run and over its
last N iterations (from a second run of 2N iterations), misses, plans and replans.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STEADY = 3
MEMORY = str(64 << 30)


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"replay_table: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stderr


def peaks(stderr):
    return [int(m.group(2)) for m in
            re.finditer(r"^iteration (\d+) peak_bytes (\d+)$", stderr, re.M)]


def optmem_run(args, replay, iterations, tmp, env):
    report = os.path.join(tmp, f"report.{iterations}.json")
    e = dict(env, LD_PRELOAD=os.path.join(args.build, "preload", "liboptmem.so"),
             OPTMEM_MODE="plan", OPTMEM_DEVICES="cpu,cuda", OPTMEM_VERIFY="1",
             OPTMEM_REPORT=report, CUDA_TEST_EXPECT="optmem")
    err = run([args.replay, replay, str(iterations), args.mode, str(STEADY)], e)
    if "verify:" in err:
        sys.exit(f"replay_table: optmem reported a problem:\n{err}")
    with open(report) as f:
        rep = json.load(f)
    dom = next(d for d in rep["device_domains"] if d["name"] == "cuda:0")
    return peaks(err), dom


def header(replay):
    fig = {}
    with open(replay) as f:
        for line in f:
            m = re.match(r"# stream \S+: buffers (\d+) native_peak (\d+) lower_bound (\d+) "
                         r"plan_peak (\d+)", line)
            if m:  # the bundled snapshots have one stream: figures of the only one
                fig = dict(zip(("buffers", "native", "lb", "plan"), map(int, m.groups())))
    return fig


def gib(b):
    return f"{b / (1 << 30):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--iterations", type=int, default=16)
    ap.add_argument("--mode", default="sync", choices=("sync", "async", "pluggable"))
    ap.add_argument("snapshots", nargs="+")
    args = ap.parse_args()
    args.replay = os.path.join(args.build, "tests", "cuda", "cuda_replay")
    optmem = os.path.join(args.build, "tools", "optmem")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(args.build, "tests", "cuda", "fake_cuda"),
               FAKE_CUDA_MEMORY=MEMORY)
    env.pop("LD_PRELOAD", None)
    print("| snapshot | native recorded (GiB) | LB (GiB) | optmem plan (GiB) | plain replay (GiB) "
          "| report LB (GiB) | optmem replay, it. 3 on (÷ report LB) | optmem replay, last half "
          f"(÷) | settled from it. | served, run | served, last {args.iterations} it. | misses "
          "| plans | replans |")
    print("|---" * 14 + "|")
    for snap in args.snapshots:
        with tempfile.TemporaryDirectory() as tmp:
            replay = os.path.join(tmp, "snap.replay")
            subprocess.run([sys.executable, os.path.join(HERE, "replay_snapshot.py"), "--optmem",
                            optmem, snap, replay], check=True, capture_output=True)
            fig = header(replay)
            plain = max(peaks(run([args.replay, replay, "3", args.mode, "0"],
                                  dict(env, CUDA_TEST_EXPECT="fake"))))
            p, dom = optmem_run(args, replay, args.iterations, tmp, env)
            _, dom2 = optmem_run(args, replay, 2 * args.iterations, tmp, env)
        s, s2 = dom["serving"], dom2["serving"]
        lb = dom["lower_bound_bytes"]
        late = max(p[len(p) // 2:])
        settled = len(p) - 1
        while settled > 0 and p[settled - 1] <= p[-1]:
            settled -= 1
        steady_req = s2["serving_requests"] - s["serving_requests"]
        steady_served = s2["served_from_plan"] - s["served_from_plan"]
        early = max(p[STEADY:])
        print(f"| {os.path.basename(snap)} | {gib(fig['native'])} | {gib(fig['lb'])} | "
              f"{gib(fig['plan'])} | {gib(plain)} | {gib(lb)} | {gib(early)} ({early / lb:.4f}) | "
              f"{gib(late)} ({late / lb:.4f}) | {settled} | "
              f"{100 * s['served_from_plan'] / s['serving_requests']:.1f}% | "
              f"{100 * steady_served / steady_req:.1f}% | {s['misses']} | {s['plans']} | "
              f"{s['replans']} |", flush=True)


if __name__ == "__main__":
    main()
