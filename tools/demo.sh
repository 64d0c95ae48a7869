#!/usr/bin/env bash
# The README's main job: a bundled PyTorch training workload under plain glibc malloc and
# under optmem, side by side, then what optmem saw and where its report is.
set -euo pipefail
build=$1
workload=${2:-cnn_bn_adam}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OPTMEM_DEMO_DIR:-$PWD/optmem-demo}
mkdir -p "$out"
script="$here/tests/workloads/$workload.py"
[ -f "$script" ] || { echo "optmem demo: no workload $workload" >&2; exit 2; }

echo "== $workload under glibc malloc" >&2
/usr/bin/python3 "$script" --json >"$out/glibc.out"
echo "== $workload under optmem (report: $out/report.json), saving its plan" >&2
rm -f "$out/plan.bin"
"$build/tools/optmem" run -o "$out/report.json" --plan-file "$out/plan.bin" -- \
    /usr/bin/python3 "$script" --json >"$out/optmem.out"
echo "== $workload under optmem, serving the saved plan from the first request" >&2
"$build/tools/optmem" run -o "$out/report-saved.json" --plan-file "$out/plan.bin" -- \
    /usr/bin/python3 "$script" --json >"$out/saved.out"

/usr/bin/python3 - "$out" "$build/tools/optmem" <<'PY'
import json, sys
out = sys.argv[1]
def result(name):
    for line in open(f"{out}/{name}.out"):
        if line.startswith("OPTMEM_RESULT "):
            return json.loads(line[len("OPTMEM_RESULT "):])
    sys.exit(f"optmem demo: {name} run printed no result")
runs = {"glibc": result("glibc"), "optmem": result("optmem"), "optmem, saved plan": result("saved")}
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"{'':26}" + "".join(f"{name:>20}" for name in runs))
rows = [("training-driven peak RSS", lambda r: mib(r["training_peak_bytes"])),
        ("peak RSS", lambda r: mib(r["peak_rss_bytes"])),
        ("steady steps/s", lambda r: f"{r['steady_steps_per_s']:.2f}"),
        ("minor faults per step", lambda r: f"{r['minflt_per_steady_step']:.0f}")]
for label, cell in rows:
    print(f"{label:26}" + "".join(f"{cell(r):>20}" for r in runs.values()))
same = all(r["losses"] == runs["glibc"]["losses"] for r in runs.values())
print(f"losses identical to glibc's, bit for bit: {'yes' if same else 'NO'}")
g, o = runs["glibc"], runs["optmem"]
try:
    report = json.load(open(f"{out}/report.json"))
except (OSError, ValueError) as e:
    print(f"no readable report: {e}")
else:
    lb = report.get("lower_bound_bytes")
    if lb:
        print(f"lower bound (max bytes live at once in managed blocks): {lb / 2**20:.1f} MiB")
        print("training-driven peak / that bound: " + ", ".join(
            f"{name} {r['training_peak_bytes'] / lb:.2f}" for name, r in runs.items()))
    print(f"report: {out}/report.json (look at it: {sys.argv[2]} report {out}/report.json)")
PY
