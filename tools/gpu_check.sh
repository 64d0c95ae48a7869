#!/usr/bin/env bash
# On a machine with a GPU: builds optmem and gpu_train, trains plainly, under liboptmem.so
# (OPTMEM_DEVICES=cpu,cuda) and, with a static cudart, under the CUPTI injection; then, where
# python3 has a CUDA PyTorch, trains tests/gpu/torch_train.py on each of PyTorch's routes to
# device memory, plainly and under optmem. Compares the losses and prints each cuda:0 report
# summary and the peak device memory.
#   tools/gpu_check.sh [--build-dir DIR | --prebuilt DIR] [--steps N] [--out DIR] [--torch-only]
# --prebuilt DIR: liboptmem.so, liboptmem_cupti.so, optmem, gpu_train and gpu_train_static
# built elsewhere, in DIR (a GPU machine without optmem's build dependencies).
# --torch-only: PyTorch's routes alone, without the C programs.
# Exit status 0: every run succeeded, losses agree, and every report holds cuda:0.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-gpu
prebuilt=
torch_only=
out=
steps=60
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --prebuilt) prebuilt=$(cd "$2" && pwd); shift 2 ;;
    --torch-only) torch_only=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR | --prebuilt DIR] [--steps N] [--out DIR] [--torch-only]" >&2
       exit 2 ;;
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

if [ -n "$prebuilt" ]; then
    lib=$prebuilt/liboptmem.so
    cupti_lib=$prebuilt/liboptmem_cupti.so
    cli=$prebuilt/optmem
    train=$prebuilt/gpu_train
    train_static=$prebuilt/gpu_train_static
    cuda_root=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
else
    cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPTMEM_WITH_CUDA=ON >/dev/null
    cmake --build "$build" -j"$(nproc)" --target optmem optmem_cupti optmem_cli gpu_train \
        gpu_train_static >/dev/null
    lib=$(find "$build" -name liboptmem.so -type f | head -n1)
    cupti_lib=$(find "$build" -name liboptmem_cupti.so -type f | head -n1)
    cli=$build/tools/optmem
    train=$build/tests/gpu/gpu_train
    train_static=$build/tests/gpu/gpu_train_static
    cuda_root=$(sed -n 's/^OPTMEM_CUDA_INCLUDE_DIR:PATH=\(.*\)\/include$/\1/p' "$build/CMakeCache.txt")
fi
# CUPTI is in the toolkit's lib64 or extras/CUPTI/lib64, often not on the search path.
cupti_path=$cuda_root/lib64:$cuda_root/lib:$cuda_root/extras/CUPTI/lib64
cupti_path+=${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

status=0
# A hung run fails the check instead of holding the GPU.
run_limit=300

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
    env "${envs[@]}" timeout "$run_limit" "$@" >"$out/$name.txt" 2>"$out/$name.err" || rc=$?
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

if [ -z "$torch_only" ]; then
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
fi

# PyTorch's routes to device memory (docs/cuda.md), each plainly and under optmem; the
# default caching allocator under optmem too (optmem then sees its segments only).
py=${PYTHON:-python3}
torch_train=$here/tests/gpu/torch_train.py
if ! "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "gpu_check: $py has no CUDA PyTorch: PyTorch's routes not checked" >&2
    exit $status
fi
async=PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
nocache=PYTORCH_NO_CUDA_MEMORY_CACHING=1
for model in transformer cnn; do
    t=torch_$model
    targs=("$torch_train" --model "$model" --steps 40)
    echo "== PyTorch, $model (outputs in $out)"
    run "${t}_caching" -- "$py" "${targs[@]}"
    run "${t}_caching_optmem" OPTMEM_DEVICES=cpu,cuda OPTMEM_REPORT="$out/${t}_caching_optmem.json" \
        LD_PRELOAD="$lib" -- "$py" "${targs[@]}"
    run "${t}_async" "$async" -- "$py" "${targs[@]}"
    run "${t}_async_optmem" -- "$cli" run --cuda --library "$lib" \
        --report "$out/${t}_async_optmem.json" -- "$py" "${targs[@]}"
    run "${t}_nocache" "$nocache" -- "$py" "${targs[@]}"
    run "${t}_nocache_optmem" "$nocache" OPTMEM_DEVICES=cpu,cuda \
        OPTMEM_REPORT="$out/${t}_nocache_optmem.json" LD_PRELOAD="$lib" -- "$py" "${targs[@]}"
    run "${t}_pluggable_optmem" OPTMEM_DEVICES=cpu,cuda \
        OPTMEM_REPORT="$out/${t}_pluggable_optmem.json" LD_PRELOAD="$lib" -- \
        "$py" "${targs[@]}" --pluggable "$lib"
    # A snapshot of the caching allocator's history, for optmem plan/report on a trace
    # that no test bundles.
    run "${t}_snapshot" -- "$py" "$torch_train" --model "$model" --steps 6 \
        --snapshot "$out/${t}_snapshot.pickle"
    echo "== losses, $model"
    for route in caching async nocache; do
        compare "${t}_$route" "${t}_${route}_optmem"
    done
    compare "${t}_caching" "${t}_pluggable_optmem"
    compare "${t}_caching" "${t}_async"
    compare "${t}_caching" "${t}_nocache"
    for route in caching async nocache pluggable; do
        summary "${t}_${route}_optmem"
    done
    if [ -f "$out/${t}_snapshot.pickle" ]; then
        echo "== $t: optmem plan on the recorded snapshot"
        "$cli" plan "$out/${t}_snapshot.pickle" || status=1
    fi
done
exit $status
