#!/usr/bin/env bash
# Builds the fuzz targets with clang and runs each for a bounded time from its seed corpus;
# fails on the first crash. Usage: run.sh [SECONDS per target, default 15] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${OPTMEM_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${1:-15}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config plan_file lifetime_csv report snapshot)

CC=clang cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

status=0
for t in "${targets[@]}"; do
    # New inputs go to a scratch corpus: the committed seeds stay small and reviewed.
    work="$build/work/$t"
    rm -rf "$work" && mkdir -p "$work"
    echo "fuzz: $t for ${seconds}s"
    if ! "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -close_fd_mask=2 -print_final_stats=0 -artifact_prefix="$build/work/$t-" \
        "$work" "$root/tests/fuzz/corpus/$t" >"$build/work/$t.log" 2>&1; then
        echo "fuzz: $t FAILED; the input is under $build/work/ ($t-crash-*):" >&2
        grep -E "ERROR|runtime error|SUMMARY|^    #[0-9] " "$build/work/$t.log" | head -20 >&2
        status=1
    else
        grep -E "DONE" "$build/work/$t.log" | tail -1
    fi
done
exit $status
