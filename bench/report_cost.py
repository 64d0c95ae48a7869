"""What the lifetime report costs a bundled workload: the report's bytes and call sites, the
process's RSS after its last step, and the page faults of optmem's report thread
(`optmem-report`, which writes the checkpoints) by then, and each rise of them as seen every
20 ms (the first: the thread's start; the second: the first checkpoint, when the first plan
is made).

Usage: /usr/bin/python3 bench/report_cost.py --lib build/preload/liboptmem.so
           [--workload cnn_bn_adam] [--steps 8] [--runs 1] [--mode plan]
One line of JSON per run. Exit status 0 on success.
"""

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def report_thread_faults():
    """Minor faults of optmem's report thread so far, or None while there is none."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                comm = f.read().strip()
            with open("/proc/self/task/%s/stat" % tid) as f:
                stat = f.read()
        except OSError:
            continue
        if comm == "optmem-report":
            return int(stat.rsplit(")", 1)[1].split()[7])  # minflt, field 10
    return None


def child(script, argv):
    """Runs the workload in this process and prints the report thread's faults after it, and
    how they grew: each rise seen by a thread that looks every 20 ms (the first is the
    thread's start, where it populates the report's buffers; the next, the first
    checkpoint)."""
    sys.argv = [script] + argv
    sys.path.insert(0, os.path.dirname(script))
    rises, done = [], threading.Event()

    def watch():
        last = 0
        while not done.wait(0.02):
            now = report_thread_faults()
            if now is not None and now != last:
                rises.append(now - last)
                last = now

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
    done.set()
    watcher.join()
    print("REPORT_THREAD_MINFLT %s" % report_thread_faults(), flush=True)
    print("REPORT_THREAD_RISES %s" % json.dumps(rises), flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lib", required=True)
    p.add_argument("--workload", default="cnn_bn_adam")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--mode", default="plan")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    script = os.path.join(HERE, "..", "tests", "workloads", a.workload + ".py")
    for run in range(a.runs):
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "r.json")
            env = dict(os.environ, LD_PRELOAD=os.path.abspath(a.lib), OPTMEM_REPORT=report,
                       OPTMEM_MODE=a.mode)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", script,
                                  "--steps", str(a.steps), "--threads", str(a.threads), "--json"],
                                 env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
            result = faults = rises = None
            for line in out.splitlines():
                if line.startswith("OPTMEM_RESULT "):
                    result = json.loads(line[len("OPTMEM_RESULT "):])
                elif line.startswith("REPORT_THREAD_MINFLT "):
                    faults = line.split()[1]
                elif line.startswith("REPORT_THREAD_RISES "):
                    rises = json.loads(line[len("REPORT_THREAD_RISES "):])
            with open(report) as f:
                r = json.load(f)
            print(json.dumps({
                "workload": a.workload, "run": run, "report_bytes": os.path.getsize(report),
                "version": r["version"], "call_sites": r["counters"]["call_sites"],
                "rss_end_bytes": result["rss_end_bytes"],
                "steady_steps_per_s": result["steady_steps_per_s"],
                "report_thread_minflt": None if faults in (None, "None") else int(faults),
                "report_thread_minflt_rises": rises}),
                flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
