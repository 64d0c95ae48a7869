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
echo "== $workload under optmem (report: $out/report.json)" >&2
"$build/tools/optmem" run -o "$out/report.json" -- /usr/bin/python3 "$script" --json \
    >"$out/optmem.out"

/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def result(name):
    for line in open(f"{out}/{name}.out"):
        if line.startswith("OPTMEM_RESULT "):
            return json.loads(line[len("OPTMEM_RESULT "):])
    sys.exit(f"optmem demo: {name} run printed no result")
g, o = result("glibc"), result("optmem")
mib = lambda b: f"{b / 2**20:8.1f} MiB"
print(f"{'':28}{'glibc':>14}{'optmem':>14}")
print(f"{'training-driven peak RSS':28}{mib(g['training_peak_bytes']):>14}{mib(o['training_peak_bytes']):>14}")
print(f"{'peak RSS':28}{mib(g['peak_rss_bytes']):>14}{mib(o['peak_rss_bytes']):>14}")
print(f"{'steady steps/s':28}{g['steady_steps_per_s']:14.2f}{o['steady_steps_per_s']:14.2f}")
print(f"losses identical: {'yes' if g['losses'] == o['losses'] else 'NO'}")
try:
    report = json.load(open(f"{out}/report.json"))
except (OSError, ValueError) as e:
    print(f"no readable report: {e}")
else:
    lb = report.get("lower_bound_bytes")
    if lb:
        print(f"lower bound (max bytes live at once in managed blocks): {lb / 2**20:.1f} MiB")
        print(f"glibc's training-driven peak is {g['training_peak_bytes'] / lb:.2f}x that bound, "
              f"optmem's {o['training_peak_bytes'] / lb:.2f}x")
    print(f"report: {out}/report.json")
PY
