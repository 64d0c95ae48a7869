#!/usr/bin/env bash
# On a machine with a GPU: builds optmem and gpu_train, trains plainly, under liboptmem.so
# (OPTMEM_DEVICES=cpu,cuda) and, with a static cudart, under the CUPTI injection; compares
# the losses and prints each cuda:0 report summary and the peak device memory.
#   tools/gpu_check.sh [--build-dir DIR] [--steps N] [--out DIR]
# Exit status 0: every run succeeded, losses agree, and both reports hold cuda:0.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-gpu
out=
steps=60
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR] [--steps N] [--out DIR]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/optmem-gpu.XXXXXX)
mkdir -p "$out"
# A relative tolerance for the losses: cuDNN and cuBLAS may pick other kernels for other
# pointer alignments; identical is what is expected.
tolerance=1e-4

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi -L failed): nothing to check" >&2
    exit 2
fi
nvidia-smi -L

cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPTMEM_WITH_CUDA=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target optmem optmem_cupti optmem_cli gpu_train \
    gpu_train_static >/dev/null
lib=$(find "$build" -name liboptmem.so -type f | head -n1)
cupti_lib=$(find "$build" -name liboptmem_cupti.so -type f | head -n1)
cli=$build/tools/optmem
train=$build/tests/gpu/gpu_train
train_static=$build/tests/gpu/gpu_train_static
cuda_root=$(sed -n 's/^OPTMEM_CUDA_INCLUDE_DIR:PATH=\(.*\)\/include$/\1/p' "$build/CMakeCache.txt")
# CUPTI is in the toolkit's lib64 or extras/CUPTI/lib64, often not on the search path.
cupti_path=$cuda_root/lib64:$cuda_root/lib:$cuda_root/extras/CUPTI/lib64
cupti_path+=${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

status=0

# run NAME ENV... -- CMD...: output in $out/NAME.txt, the GPU's used memory sampled beside it.
run() {
    local name=$1
    shift
    local envs=()
    while [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 \
        >"$out/$name.smi" 2>/dev/null &
    local smi=$!
    local rc=0
    env "${envs[@]}" "$@" >"$out/$name.txt" 2>"$out/$name.err" || rc=$?
    kill "$smi" 2>/dev/null || true
    wait "$smi" 2>/dev/null || true
    if [ $rc -ne 0 ]; then
        echo "gpu_check: $name exited with $rc:" >&2
        tail -n 20 "$out/$name.err" >&2
        status=1
    fi
    local smi_peak
    smi_peak=$(sort -n "$out/$name.smi" | tail -n1)
    printf '%-16s %s; nvidia-smi peak %s MiB (whole GPU); %s\n' "$name" \
        "$(grep -h '^peak device memory' "$out/$name.txt" || echo 'no peak printed')" \
        "${smi_peak:-?}" "$(grep -h '^steps/s' "$out/$name.txt" || true)"
    grep -h '^optmem:' "$out/$name.err" | sed "s/^/  $name: /" || true
}

# compare A B: the step losses of two runs, identical or within the tolerance.
compare() {
    local a=$1 b=$2
    if ! /usr/bin/python3 - "$out/$a.txt" "$out/$b.txt" "$tolerance" <<'EOF'; then
import sys
def losses(path):
    with open(path) as f:
        return [(l.split()[1], float(l.split()[3])) for l in f if l.startswith("step ")]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
name_a, name_b = (p.rsplit("/", 1)[-1][:-4] for p in sys.argv[1:3])
if not a or [s for s, _ in a] != [s for s, _ in b]:
    print("losses: %s and %s printed different steps" % (name_a, name_b))
    sys.exit(1)
worst = max(abs(x - y) / max(abs(x), 1e-30) for (_, x), (_, y) in zip(a, b))
same = all(x == y for (_, x), (_, y) in zip(a, b))
print("losses %s vs %s: %s (%d steps, last %.9g vs %.9g, max relative difference %.3g)" % (
    name_a, name_b, "identical" if same else "differ", len(a), a[-1][1], b[-1][1], worst))
sys.exit(0 if worst <= tol else 1)
EOF
        echo "gpu_check: the losses of $a and $b differ by more than $tolerance" >&2
        status=1
    fi
}

# summary NAME: the cuda:0 section of a run's report.
summary() {
    local name=$1
    echo "== $name: optmem report --domain cuda:0"
    if ! "$cli" report "$out/$name.json" --domain cuda:0; then
        echo "gpu_check: the report of $name has no cuda:0 section" >&2
        status=1
    fi
}

args=(--steps "$steps")
echo "== runs (outputs in $out)"
run plain -- "$train" "${args[@]}"
run optmem OPTMEM_DEVICES=cpu,cuda OPTMEM_REPORT="$out/optmem.json" LD_PRELOAD="$lib" -- \
    "$train" "${args[@]}"
run static -- "$train_static" "${args[@]}"
run static_cupti CUDA_INJECTION64_PATH="$cupti_lib" OPTMEM_REPORT="$out/static_cupti.json" \
    LD_LIBRARY_PATH="$cupti_path" -- "$train_static" "${args[@]}"
echo "== losses"
compare plain optmem
compare static static_cupti
compare plain static
summary optmem
summary static_cupti
exit $status
