"""What call sites cost a program under optmem, for one or more builds of the library: the
report's bytes, its call sites (listed, and folded into folds), the requests seen once, and
the program's resident anonymous memory at its end (before the report written at exit), in
trace mode and with OPTMEM_MODE=off (the library loaded, nothing traced: the difference is
optmem's own memory, the tracer's tables and sites above all).

Programs: the bundled workloads (tests/workloads/NAME.py, run to their end), `import torch,
torchvision` and `import sklearn...` alone and each followed by a loop of 300 iterations.

Usage: /usr/bin/python3 bench/fold_cost.py --lib NAME=build/preload/liboptmem.so [--lib ...]
           [--programs import_torch,cnn_bn_adam,...] [--steps N] [--runs 1]
One line of JSON per run. Exit status 0 on success.
"""

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "..", "tests", "workloads")
# A loop after the imports, single-threaded and of fixed length, long enough (3 s) for the
# checkpoints to see its iterations: what a training run's imports leave in the tracer.
LOOP = """
import time
for _ in range(300):
    a = bytearray(50000)
    b = bytearray(30000)
    del a, b
    time.sleep(0.01)
"""
IMPORTS = {
    "import_torch": "import torch, torchvision",
    "import_sklearn": "import sklearn.ensemble, sklearn.neural_network, sklearn.linear_model",
    "import_torch_loop": "import torch, torchvision" + LOOP,
    "import_sklearn_loop": "import sklearn.ensemble, sklearn.neural_network, sklearn.linear_model"
                           + LOOP,
}
DEFAULT = ("import_torch,import_torch_loop,import_sklearn,import_sklearn_loop,sklearn_fit,mlp_sgd,"
           "cnn_bn_adam,transformer_adamw,numpy_mlp")


def anonymous_kib():
    """Resident KiB of the process's anonymous mappings (tests/workloads/common.py reads
    /proc/self/smaps in small pieces, which optmem does not manage)."""
    sys.path.insert(0, WORKLOADS)
    import common
    return common.resident_kib_by_kind()["anonymous"]


def child(program, argv):
    """Runs the program in this process, then prints its resident anonymous memory."""
    if program in IMPORTS:
        exec(IMPORTS[program], {})
    else:
        script = os.path.join(WORKLOADS, program + ".py")
        sys.argv = [script] + argv
        sys.path.insert(0, WORKLOADS)
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit:
            pass
    print("ANON_KIB %d" % anonymous_kib(), flush=True)


def run_one(lib, mode, program, steps, tmp):
    report = os.path.join(tmp, "r.json")
    if os.path.exists(report):
        os.unlink(report)
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(lib), OPTMEM_REPORT=report,
               OPTMEM_MODE=mode)
    argv = [] if program in IMPORTS else ["--steps", str(steps)] if steps else []
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", program] + argv,
                         env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    anon = next(int(line.split()[1]) for line in out.splitlines() if line.startswith("ANON_KIB"))
    rec = {"program": program, "mode": mode, "anon_kib": anon}
    if mode != "off":
        with open(report) as f:
            r = json.load(f)
        sites = r["sites"]
        rec.update({
            "report_bytes": os.path.getsize(report), "version": r["version"],
            "managed_requests": r["counters"]["managed_requests"],
            "sites_listed": len(sites),
            "folds": sum(1 for s in sites if "folded" in s),
            "folded_sites": r["counters"].get("folded_sites", 0),
            "sites_seen_once": sum(1 for s in sites if s["count"] == 1 and "folded" not in s),
            "bytes_seen_once": sum(s["total_bytes"] for s in sites
                                   if s["count"] == 1 and "folded" not in s),
            "frames": len(r["frames"]), "python_frames": len(r["python_frames"])})
    return rec


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lib", action="append", required=True, metavar="NAME=PATH")
    p.add_argument("--programs", default=DEFAULT)
    p.add_argument("--steps", type=int, default=None, help="workload steps (default: theirs)")
    p.add_argument("--runs", type=int, default=1)
    a = p.parse_args()
    libs = [spec.split("=", 1) for spec in a.lib]
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(a.runs):
            for program in a.programs.split(","):
                # The builds alternate, so that a change of load on the machine falls on all.
                for i, (name, lib) in enumerate(libs):
                    for mode in (("off",) if i == 0 else ()) + ("trace",):
                        rec = run_one(lib, mode, program, a.steps, tmp)
                        rec.update({"lib": name if mode != "off" else "off", "run": run})
                        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
