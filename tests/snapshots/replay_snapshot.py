"""Turns a PyTorch memory snapshot into a replay file for tests/cuda/replay.c.

Usage: replay_snapshot.py --optmem OPTMEM SNAPSHOT.pickle OUT.replay [--device D]

Runs `optmem plan SNAPSHOT -o` for the buffers' lifetimes (one CSV per device and stream) and
writes one device's buffers as events in the order they happened: "a ID SIZE STREAM" where a
buffer is born, "f ID" where it dies (a death comes before a birth at the same event number,
lifetimes being [birth, death)). A buffer live through the whole recorded window (born before
recording began, live when the snapshot was taken) is persistent, "p SIZE STREAM", allocated
once before the replay's iterations; one live at the end only is left to die with the
iteration. The header comments carry what optmem plan printed for the device: native peak,
lower bound and plan peak, per stream.
"""
import argparse
import csv
import glob
import os
import re
import subprocess
import sys
import tempfile

GROUP = re.compile(r"^device (-?\d+) stream (-?\d+):$")
FIGURE = re.compile(r"^  (native peak|lower bound|plan peak|buffers):\s+(\d+)")


def plan(optmem, snapshot, out_dir):
    """optmem plan's groups: [(device, stream, figures, csv path)]."""
    out = os.path.join(out_dir, "life.csv")
    proc = subprocess.run([optmem, "plan", snapshot, "-o", out], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"replay_snapshot: optmem plan failed ({proc.returncode}): {proc.stderr.strip()}")
    groups = []
    for line in proc.stdout.splitlines():
        m = GROUP.match(line)
        if m:
            groups.append([int(m.group(1)), int(m.group(2)), {}, None])
            continue
        m = FIGURE.match(line)
        if m and groups:
            groups[-1][2][m.group(1)] = int(m.group(2))
    several = glob.glob(os.path.join(out_dir, "life.d*.s*.csv"))
    for g in groups:
        g[3] = os.path.join(out_dir, f"life.d{g[0]}.s{g[1]}.csv") if several else out
    return groups


def read_life(path):
    with open(path, newline="") as f:
        return [(int(r["lower"]), int(r["upper"]), int(r["size"])) for r in csv.DictReader(f)]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optmem", required=True, help="the optmem CLI")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("snapshot")
    ap.add_argument("out")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        groups = [g for g in plan(args.optmem, args.snapshot, tmp) if g[0] == args.device]
        if not groups:
            sys.exit(f"replay_snapshot: {args.snapshot}: no buffers on device {args.device}")
        lives = [(stream, life) for _, stream, _, path in groups for life in read_life(path)]
    end = max(upper for _, (_, upper, _) in lives)
    persistent, events = [], []
    for stream, (lower, upper, size) in lives:
        if lower == 0 and upper == end:
            persistent.append((size, stream))
            continue
        i = len(events) // 2
        events.append((lower, 1, i, f"a {i} {size} {stream}"))
        events.append((upper, 0, i, f"f {i}"))
    events.sort()
    with open(args.out, "w") as f:
        f.write("optmem-replay 1\n")
        f.write(f"# from {os.path.basename(args.snapshot)} by optmem plan, device {args.device}\n")
        for _, stream, fig, _ in groups:
            f.write(f"# stream {stream}: buffers {fig.get('buffers')} native_peak "
                    f"{fig.get('native peak')} lower_bound {fig.get('lower bound')} plan_peak "
                    f"{fig.get('plan peak')}\n")
        for size, stream in persistent:
            f.write(f"p {size} {stream}\n")
        for *_, line in events:
            f.write(line + "\n")
    print(f"{args.out}: {len(persistent)} persistent buffers, {len(events) // 2} per iteration, "
          f"{len(groups)} stream(s)")


if __name__ == "__main__":
    main()
