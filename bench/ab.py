"""Run one bundled workload under several named environments in turn, many times, and print each run's steps/s as a ratio to the first environment's in the same round."""

import argparse
import statistics
import subprocess
import sys
import time

from peers import WORKLOADS, children_cpu_s, command_for, log, parse_result, system_busy_s

USAGE_EXAMPLE = """example (glibc's placement without its page faults, against plan mode):
  /usr/bin/python3 bench/ab.py --workload cnn_bn_adam --steps 40 --runs 8 \\
      tcmalloc:LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \\
      plan:LD_PRELOAD=build/preload/liboptmem.so,OPTMEM_MODE=plan \\
      glibc-no-trim:GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296
"""


def parse_config(spec):
    """'NAME:KEY=VAL,KEY=VAL' (or 'NAME:' for the parent environment) -> (name, dict)."""
    name, sep, pairs = spec.partition(":")
    if not sep or not name:
        raise SystemExit("ab.py: a configuration is NAME:KEY=VAL[,KEY=VAL...], got %r" % spec)
    env = {}
    for pair in filter(None, pairs.split(",")):
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise SystemExit("ab.py: %r: %r is not KEY=VAL" % (name, pair))
        env[key] = value
    return name, env


def run_once(args, env_extra):
    """One run of the workload; its OPTMEM_RESULT dict and the cores other processes used."""
    cmd, env = command_for(WORKLOADS[args.workload], env_extra, None, args, None)
    t0, busy0, ours0 = time.perf_counter(), system_busy_s(), children_cpu_s()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    others = max(0.0, (system_busy_s() - busy0) - (children_cpu_s() - ours0)) / wall
    result = parse_result(proc.stdout) if proc.returncode == 0 else None
    if result is None:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise SystemExit("ab.py: run failed (exit %d): %s" % (proc.returncode, tail))
    return result, others


def table(configs, results):
    """Markdown rows: per configuration its runs, median, and per-run ratios to the first."""
    first = results[configs[0][0]]
    rows = ["| configuration | steps/s, run by run | median steps/s | ratio to %s, run by run "
            "| median ratio | minflt/step (median) | training peak MiB (median) | losses as %s |"
            % (configs[0][0], configs[0][0]), "|---|---|---|---|---|---|---|---|"]
    for name, _ in configs:
        runs = results[name]
        speed = [r["steady_steps_per_s"] for r in runs]
        ratios = [s / f["steady_steps_per_s"] for s, f in zip(speed, first)]
        same = all(r["losses"] == f["losses"] for r, f in zip(runs, first))
        rows.append("| %s | %s | %.3f | %s | %.3f | %.0f | %.1f | %s |" % (
            name, " ".join("%.2f" % s for s in speed), statistics.median(speed),
            " ".join("%.3f" % x for x in ratios), statistics.median(ratios),
            statistics.median(r["minflt_per_steady_step"] for r in runs),
            statistics.median(r["training_peak_bytes"] for r in runs) / 2**20,
            "identical" if same else "DIFFERENT"))
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, epilog=USAGE_EXAMPLE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("configs", nargs="+", metavar="NAME:KEY=VAL[,KEY=VAL...]",
                   help="an environment to run under (values may not hold commas); the first "
                        "is the reference")
    p.add_argument("--workload", default="cnn_bn_adam",
                   choices=[k for k, w in WORKLOADS.items() if w["kind"] == "python"])
    p.add_argument("--steps", type=int, default=40, help="steps per run (default %(default)s)")
    p.add_argument("--runs", type=int, default=8, help="rounds (default %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="threads (default %(default)s)")
    p.add_argument("--batch-scale", type=int, default=1, help="batch multiplier (default 1)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per run (default 600)")
    args = p.parse_args()
    configs = [parse_config(c) for c in args.configs]
    if len({n for n, _ in configs}) != len(configs):
        p.error("configuration names must differ")
    if args.steps < 4 or args.runs < 1:
        p.error("--steps must be at least 4 (3 are warm-up) and --runs at least 1")
    results = {name: [] for name, _ in configs}
    busiest = 0.0
    for round_ in range(args.runs):
        for name, env in configs:
            result, others = run_once(args, env)
            results[name].append(result)
            busiest = max(busiest, others)
            log("round %d/%d %-16s %.3f steps/s  %.0f faults/step  others %.2f cores"
                % (round_ + 1, args.runs, name, result["steady_steps_per_s"],
                   result["minflt_per_steady_step"], others))
    print("%s, %d steps, %d round(s) of %d configuration(s), interleaved; threads=%d%s.\n"
          % (args.workload, args.steps, args.runs, len(configs), args.threads,
             "; batch x %d" % args.batch_scale if args.batch_scale != 1 else ""))
    print(table(configs, results))
    print("\nOther processes used at most %.2f cores during any run." % busiest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
